// LayerLoop's decode attention: each decode token's partial (o, lse) on this rank by its layer's
// strategy, tokens of batchable strategies in one call, merged across ranks by log-sum-exp.
#include <vector>

#include "worker/engine/layer_loop.h"

namespace millipede {

Status LayerLoop::DecodePartials(std::span<RankEntry> run, std::span<const DecodeInput> inputs,
                              AttentionEnv& env, TensorView o, TensorView lse) {
  const int64_t layer = inputs.front().layer;
  const bool recorded = run.front().graph_rows > 0;
  // One token alone runs its strategy (a recorded one reads its lengths from the inputs), unless
  // a recorded step batches it (BatchDecodeAttention's lengths).
  const bool batchable = run[0].seq->attention(layer).decode->batchable();
  if (run.size() == 1 && (!recorded || !batchable))
    return run[0].seq->attention(layer).decode->Partial(env, inputs[0], o, lse);
  // Batchable strategies: every token of the run in one call; the run's queries are consecutive
  // rows of the step's buffer. A recorded step reads the same rows (BatchRows: the store's held
  // rows and the token's) through views of its bucket and the lengths it uploaded.
  const ModelConfig& c = ctx_.config();
  const int64_t n = static_cast<int64_t>(run.size());
  std::vector<ConstTensorView> k, v;
  k.reserve(run.size());
  v.reserve(run.size());
  for (size_t i = 0; i < run.size(); ++i) {
    ConstKvRows rows;
    if (recorded) {
      MP_ASSIGN_OR_RETURN(const KvRows fixed, inputs[i].store->FixedRows(run[i].graph_rows));
      rows = {AsConst(fixed.k), AsConst(fixed.v)};
    } else {
      MP_ASSIGN_OR_RETURN(rows, run[i].seq->attention(layer).decode->BatchRows(inputs[i]));
    }
    k.push_back(rows.k);
    v.push_back(rows.v);
  }
  BatchDecodeAttentionArgs a;
  // One token's queries may lie elsewhere (the fused Q/K/V output).
  if (n == 1) {
    a.q = inputs[0].q;
  } else {
    MP_ASSIGN_OR_RETURN(a.q, Reshape(SliceRows(ctx_.workspace->q.cview(), run.front().row0, n),
                                     Shape{n, c.num_attention_heads, c.head_dim}));
  }
  a.k = k;
  a.v = v;
  a.o = o;
  a.lse = lse;
  const DecodeStrategy::Windows windows = run[0].seq->attention(layer).decode->batch_windows();
  if (windows.window != nullptr) {
    a.kv_head_window = windows.window->data();
    a.sink_tokens = windows.sink;
  }
  if (recorded) a.lengths = ctx_.workspace->decode_lengths(run.front().row0, n);
  return env.backend.BatchDecodeAttention(a);
}

Status LayerLoop::AttendDecode(int64_t layer, std::span<RankEntry> run, AttentionEnv& env) {
  const ModelConfig& c = ctx_.config();
  Workspace& ws = *ctx_.workspace;
  const int64_t n = static_cast<int64_t>(run.size()), row0 = run.front().row0;
  const Shape o_shape{n, c.num_attention_heads, c.head_dim};
  std::vector<DecodeInput> inputs;
  for (RankEntry& e : run) {
    inputs.push_back({layer, &e.seq->kv(layer), e.stored_rows(), e.q, e.length_before});
    if (e.graph_rows > 0) {
      const int64_t i = e.row0;
      inputs.back().recorded_rows = e.graph_rows;
      inputs.back().recorded_length = ws.decode_lengths(i, 1);
      inputs.back().recorded_generated = ws.decode_generated(i, 1);
    }
  }
  MP_ASSIGN_OR_RETURN(TensorView o_out, Reshape(SliceRows(ws.o_acc.view(), row0, n), o_shape));
  TensorView lse_out = SliceRows(ws.lse_acc.view(), row0, n);
  if (ctx_.comm->size() == 1) {
    MP_RETURN_IF_ERROR(DecodePartials(run, inputs, env, o_out, lse_out));
  } else {
    // This rank's partials as o then lse in one buffer, so that one all-gather moves both.
    const int64_t ranks = ctx_.comm->size(), heads = c.num_attention_heads;
    const int64_t o_size = n * heads * c.head_dim, per_rank = o_size + n * heads;
    MP_ASSIGN_OR_RETURN(const TensorView send, SubView(env.scratch.partials, 0, Shape{per_rank}));
    MP_ASSIGN_OR_RETURN(const TensorView o_part, SubView(send, 0, o_shape));
    MP_ASSIGN_OR_RETURN(const TensorView lse_part, SubView(send, o_size, Shape{n, heads}));
    MP_RETURN_IF_ERROR(DecodePartials(run, inputs, env, o_part, lse_part));
    MP_RETURN_IF_ERROR(env.profiler.Mark(&ctx_.stats.attention_s));
    // Only O(tokens x heads x head_dim) values per rank cross the wire, merged by log-sum-exp
    // where they arrive (each rank's o and lse one buffer apart).
    MP_ASSIGN_OR_RETURN(const TensorView recv,
                        SubView(env.scratch.gathered, 0, Shape{ranks, per_rank}));
    MP_RETURN_IF_ERROR(ctx_.comm->AllGather(AsConst(send), recv));
    const float* gathered = recv.as<const float>();
    MergeStateArgs merge{{gathered, DType::kF32, Shape{ranks, n, heads, c.head_dim}},
                         {gathered + o_size, DType::kF32, Shape{ranks, n, heads}},
                         o_out,
                         lse_out,
                         per_rank};
    MP_RETURN_IF_ERROR(ctx_.backend->MergeState(merge));
    ctx_.stats.comm_bytes += static_cast<int64_t>(send.NumBytes());
    MP_RETURN_IF_ERROR(env.profiler.Mark(&ctx_.stats.comm_wait_s));
  }
  for (size_t i = 0; i < run.size(); ++i)
    MP_RETURN_IF_ERROR(run[i].seq->attention(layer).decode->AfterMerge(
        env, inputs[i], AsConst(SliceRows(lse_out, static_cast<int64_t>(i), 1))));
  return env.profiler.Mark(&ctx_.stats.attention_s);
}

}  // namespace millipede
