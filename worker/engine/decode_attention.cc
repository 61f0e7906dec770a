// LayerLoop's decode attention: each decode token's partial (o, lse) on this rank by its layer's
// strategy, the tokens of batchable strategies in one call over their parts (AttendParts),
// merged across ranks by log-sum-exp.
#include <algorithm>
#include <vector>

#include "worker/attention/decode_parts.h"
#include "worker/engine/layer_loop.h"

namespace millipede {

Status LayerLoop::DecodePartials(std::span<RankEntry> run, std::span<const DecodeInput> inputs,
                                 AttentionEnv& env, TensorView o, TensorView lse) {
  const int64_t layer = inputs.front().layer;
  const bool recorded = run.front().graph_rows > 0;
  DecodeStrategy& first = *run[0].seq->attention(layer).decode;
  // One token alone runs its strategy (a recorded one reads its lengths from the inputs), unless
  // a recorded step batches it (BatchDecodeAttention's lengths).
  if (run.size() == 1 && (!recorded || !first.batches_recorded()))
    return first.Partial(env, inputs[0], o, lse);
  if (!recorded) {
    if (first.batchable()) return BatchedPartials(run, inputs, env, o, lse);
    // Strategies that batch with their own kind (the layer loop grouped them by BatchesWith).
    const ModelConfig& c = ctx_.config();
    const int64_t n = static_cast<int64_t>(run.size());
    std::vector<DecodeStrategy*> strategies;
    for (const RankEntry& e : run) strategies.push_back(e.seq->attention(layer).decode.get());
    MP_ASSIGN_OR_RETURN(const ConstTensorView q,
                        Reshape(SliceRows(ctx_.workspace->q.cview(), run.front().row0, n),
                                Shape{n, c.num_attention_heads, c.head_dim}));
    return first.BatchPartials(env, strategies, inputs, q, o, lse);
  }
  // A recorded step: every token's store's held rows and its own (FixedRows) through views of
  // its bucket, and the lengths it uploaded.
  const ModelConfig& c = ctx_.config();
  const int64_t n = static_cast<int64_t>(run.size());
  std::vector<ConstTensorView> k, v;
  k.reserve(run.size());
  v.reserve(run.size());
  for (size_t i = 0; i < run.size(); ++i) {
    MP_ASSIGN_OR_RETURN(const KvRows fixed, inputs[i].store->FixedRows(run[i].graph_rows));
    k.push_back(AsConst(fixed.k));
    v.push_back(AsConst(fixed.v));
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
  const DecodeStrategy::Windows windows = first.batch_windows();
  if (windows.window != nullptr) {
    a.kv_head_window = windows.window->data();
    a.sink_tokens = windows.sink;
  }
  a.lengths = ctx_.workspace->decode_lengths(run.front().row0, n);
  return env.backend.BatchDecodeAttention(a);
}

Status LayerLoop::BatchedPartials(std::span<RankEntry> run, std::span<const DecodeInput> inputs,
                                  AttentionEnv& env, TensorView o, TensorView lse) {
  const ModelConfig& c = ctx_.config();
  const int64_t layer = inputs.front().layer;
  const int64_t n = static_cast<int64_t>(run.size());
  std::vector<std::vector<DecodePart>> parts(run.size());
  for (size_t i = 0; i < run.size(); ++i)
    MP_RETURN_IF_ERROR(run[i].seq->attention(layer).decode->BatchParts(env, inputs[i], &parts[i]));
  // One token's queries may lie elsewhere (the fused Q/K/V output).
  ConstTensorView q = inputs[0].q;
  if (n > 1) {
    MP_ASSIGN_OR_RETURN(q, Reshape(SliceRows(ctx_.workspace->q.cview(), run.front().row0, n),
                                   Shape{n, c.num_attention_heads, c.head_dim}));
  }
  return AttendParts(env, q, parts, run[0].seq->attention(layer).decode->batch_windows(), o, lse,
                     &parts_o_, &parts_lse_);
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
  MP_RETURN_IF_ERROR(AfterMerges(run, inputs, env, AsConst(lse_out)));
  return env.profiler.Mark(&ctx_.stats.attention_s);
}

Status LayerLoop::AfterMerges(std::span<RankEntry> run, std::span<const DecodeInput> inputs,
                              AttentionEnv& env, ConstTensorView lse) {
  const int64_t layer = inputs.front().layer;
  const auto strategy = [&](size_t i) { return run[i].seq->attention(layer).decode.get(); };
  // In an unrecorded run, the tokens whose strategies batch their AfterMerge go in one call per
  // kind (every rank groups alike: the grouping depends on the strategies alone).
  std::vector<uint8_t> done(run.size(), 0);
  const bool batch = run.size() > 1 && run.front().graph_rows == 0;
  std::vector<DecodeStrategy*> group;
  std::vector<DecodeInput> group_inputs;
  std::vector<int32_t> rows;
  for (size_t i = 0; i < run.size(); ++i) {
    if (done[i]) continue;
    DecodeStrategy* first = strategy(i);
    group.assign(1, first);
    group_inputs.assign(1, inputs[i]);
    rows.assign(1, static_cast<int32_t>(i));
    for (size_t j = i + 1; batch && j < run.size(); ++j) {
      if (done[j] || !first->AfterMergeBatchesWith(*strategy(j))) continue;
      done[j] = 1;
      group.push_back(strategy(j));
      group_inputs.push_back(inputs[j]);
      rows.push_back(static_cast<int32_t>(j));
    }
    if (group.size() == 1) {
      MP_RETURN_IF_ERROR(
          first->AfterMerge(env, inputs[i], SliceRows(lse, static_cast<int64_t>(i), 1)));
      continue;
    }
    const ModelConfig& c = ctx_.config();
    const int64_t n = static_cast<int64_t>(run.size());
    MP_ASSIGN_OR_RETURN(const ConstTensorView q,
                        Reshape(SliceRows(ctx_.workspace->q.cview(), run.front().row0, n),
                                Shape{n, c.num_attention_heads, c.head_dim}));
    MP_RETURN_IF_ERROR(first->AfterMergeBatch(env, group, group_inputs, q, lse, rows));
  }
  return OkStatus();
}

}  // namespace millipede
