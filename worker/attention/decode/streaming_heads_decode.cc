#include "worker/attention/decode/streaming_heads_decode.h"

#include "common/shard_plan.h"
#include "worker/attention/scratch_buffer.h"

namespace millipede {

Status StreamingHeadsDecode::BatchParts(AttentionEnv& env, const DecodeInput& in,
                                        std::vector<DecodePart>* parts) {
  const std::vector<TokenRange>& held = in.store->held_ranges();
  const int64_t held_end = held.empty() ? 0 : held.back().end;
  MP_ASSERT(batchable_ && held.size() <= 1 && (held.empty() || held.front().begin == 0) &&
                (in.step_rows == 0 || in.position == held_end),
            "streaming heads: batched decode needs positions 0 .. n - 1 in order");
  return AppendEveryRow(in, parts);
}

Status StreamingHeadsDecode::Partial(AttentionEnv& env, const DecodeInput& in, TensorView o,
                                     TensorView lse) {
  Backend& b = env.backend;
  MP_ASSIGN_OR_RETURN(const ConstKvRows rows, in.store->Rows(in.step_rows));
  std::vector<TokenRange> runs = in.store->held_ranges();
  if (in.step_rows > 0) AppendRange(&runs, {in.position, in.position + 1});
  if (runs.empty()) return b.ClearState(o, lse);
  int64_t row = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    const TokenRange& run = runs[i];
    TensorView run_o = o, run_lse = lse;
    if (i > 0) {
      MP_ASSIGN_OR_RETURN(run_o, ScratchBuffer(b, &tmp_o_, DType::kF32, o.shape));
      MP_ASSIGN_OR_RETURN(run_lse, ScratchBuffer(b, &tmp_lse_, DType::kF32, lse.shape));
    }
    // Every key precedes (or is) the token: no mask beyond the windows.
    AttentionArgs a;
    a.q = in.q;
    a.k = SliceRows(rows.k, row, run.size());
    a.v = SliceRows(rows.v, row, run.size());
    a.q_offset = in.position;
    a.k_offset = run.begin;
    a.mask = AttentionMask::kNone;
    a.kv_head_window = windows_.data();
    a.sink_tokens = sink_;
    a.o = run_o;
    a.lse = run_lse;
    MP_RETURN_IF_ERROR(b.Attention(a));
    if (i > 0) MP_RETURN_IF_ERROR(b.MergeStateInPlace(o, lse, AsConst(run_o), AsConst(run_lse)));
    row += run.size();
  }
  return OkStatus();
}

}  // namespace millipede
