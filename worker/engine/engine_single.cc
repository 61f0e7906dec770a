// Synthetic sequences for decode benchmarks: a cache of zeros made without a prefill.
#include <algorithm>

#include "worker/engine/engine.h"

namespace millipede {

Status Engine::StartSyntheticSequence(SequenceId id, int64_t length, int64_t decode_positions,
                                      int64_t more_prompt) {
  const int num_ranks = ctx_.comm->size(), rank = ctx_.comm->rank();
  MP_REQUIRE(decode_positions >= 0 && more_prompt >= 0,
             "synthetic sequence: negative decode or prompt positions");
  MP_ASSIGN_OR_RETURN(ShardPlan plan, ShardPlan::Create(length, num_ranks));
  const int64_t mine = plan.RankPromptTokens(rank);
  // decode_positions K/V rows round-robin over the ranks: DecodeRowsPerRank of that many + 1
  // tokens (the last generated token is never stored).
  const int64_t decode_rows = DecodeRowsPerRank(decode_positions + 1, num_ranks);
  const int64_t capacity =
      std::max<int64_t>(1, mine + PromptRowsBoundPerRank(more_prompt, num_ranks) + decode_rows);
  // The cache is written a chunk of rows at a time, each chunk committed like a prefill step
  // (stores that stage or drop rows take it as such).
  const int64_t rows = std::min<int64_t>(std::max<int64_t>(mine, 1), 4096);
  MP_RETURN_IF_ERROR(StartSequence(id, SequenceOptions{capacity, rows, policy_, decode_rows}));
  Sequence& s = *mutable_sequence(id);
  const ModelConfig& c = config();
  const Shape shape{rows, c.num_key_value_heads, c.head_dim};
  std::vector<float> host_zeros(static_cast<size_t>(shape.NumElements()), 0.0f);
  MP_ASSIGN_OR_RETURN(BackendTensor zeros, ctx_.backend->Allocate(DType::kF32, shape));
  MP_RETURN_IF_ERROR(ctx_.backend->CopyFromHost(
      ConstTensorView{host_zeros.data(), DType::kF32, shape}, zeros.view()));
  std::vector<TokenRange> ranges;
  for (const TokenRange& r : plan.RankPromptRanges(rank))
    if (!r.empty()) ranges.push_back(r);
  for (int64_t row = 0; row < std::max<int64_t>(mine, 1); row += rows) {
    const int64_t m = std::min(rows, mine - row);
    for (int64_t layer = 0; layer < c.num_hidden_layers && m > 0; ++layer) {
      MP_ASSIGN_OR_RETURN(KvRows dst, s.kv(layer).StepRows(0, m));
      ConstTensorView z = SliceRows(zeros.cview(), 0, m);
      MP_RETURN_IF_ERROR(ctx_.backend->Convert(z, dst.k));
      MP_RETURN_IF_ERROR(ctx_.backend->Convert(z, dst.v));
      MP_RETURN_IF_ERROR(s.kv(layer).EndWrites(m));
    }
    MP_RETURN_IF_ERROR(s.Commit(SliceRangeRows(ranges, row, std::max<int64_t>(m, 0)), length));
  }
  return ctx_.backend->Synchronize();
}

}  // namespace millipede
