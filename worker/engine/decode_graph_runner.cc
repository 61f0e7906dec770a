#include "worker/engine/decode_graph_runner.h"

#include <vector>

namespace millipede {

bool DecodeGraphRunner::Recordable(const std::vector<RankEntry>& entries) const {
  if (ctx_.options.decode_graphs == DecodeGraphs::kOff ||
      (ctx_.options.decode_graphs == DecodeGraphs::kAuto && ctx_.backend->kind() != BackendKind::kCuda))
    return false;
  const ModelConfig& c = ctx_.config();
  if (ctx_.comm->size() != 1 || ctx_.options.profile || ctx_.options.attention_observer || entries.empty() ||
      !ctx_.backend->DecodeTakesLengths(c.head_dim, c.num_attention_heads / c.num_key_value_heads,
                                    ctx_.options.kv_dtype) ||
      c.num_key_value_heads > 64)  // the attention kernels' window table
    return false;
  // Tokens whose roles batch by parts but not inside a recording (OmniKV's, static eviction's)
  // run one by one in a recorded step: with two or more of them the unrecorded step, which
  // batches them, is the faster.
  int per_token = 0;
  for (const RankEntry& e : entries) {
    if (e.prefill() || e.stored_rows() != 1) return false;
    bool alone = false;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      const KvStore& store = e.seq->kv(l);
      const DecodeStrategy& decode = *e.seq->attention(l).decode;
      if (!decode.recordable() || store.fixed_capacity() <= store.held_rows()) return false;
      alone = alone || (decode.batchable() && !decode.batches_recorded());
    }
    if (alone && ++per_token > 1) return false;
  }
  return true;
}

Status DecodeGraphRunner::RunBody(std::vector<RankEntry>& entries) {
  const int64_t rows = static_cast<int64_t>(entries.size());
  MP_RETURN_IF_ERROR(loop_.EmbedUploaded(rows));
  StepProfiler off(*ctx_.backend, false);
  for (int64_t layer = 0; layer < ctx_.config().num_hidden_layers; ++layer)
    MP_RETURN_IF_ERROR(loop_.RunLayer(layer, entries, rows, off));
  return loop_.ComputeLogits(entries);
}

Status DecodeGraphRunner::Run(std::vector<RankEntry>& entries) {
  const int64_t n = static_cast<int64_t>(entries.size());
  Workspace& ws = *ctx_.workspace;
  // Each token's cache row (the store's held rows), its sequence's rows after the step and those
  // after its context; the key: the sequences, their buckets and RoPE tables, the buffers' epochs.
  std::vector<int64_t> meta(static_cast<size_t>(3 * n));
  DecodeGraphKey key;
  for (int64_t i = 0; i < n; ++i) {
    RankEntry& e = entries[static_cast<size_t>(i)];
    const KvStore& store = e.seq->kv(0);
    const int64_t after = store.held_rows() + 1;
    e.graph_rows = DecodeGraphBucket(after, store.fixed_capacity());
    meta[static_cast<size_t>(i)] = store.held_rows();
    meta[static_cast<size_t>(n + i)] = after;
    meta[static_cast<size_t>(2 * n + i)] = after - e.seq->decode_start();
    key.values.insert(key.values.end(),
                      {e.seq->id(), e.graph_rows, reinterpret_cast<intptr_t>(e.inv_freq.data)});
  }
  key.values.push_back(static_cast<int64_t>(ws.epoch()));
  key.values.push_back(static_cast<int64_t>(ctx_.backend->memory_epoch()));
  MP_RETURN_IF_ERROR(loop_.UploadIds(entries, n));
  for (int64_t part = 0; part < 3; ++part) {
    MP_ASSIGN_OR_RETURN(TensorView dst, Reshape(SliceRows(ws.decode_meta.view(), part, 1),
                                                Shape{ws.step_rows()}));
    MP_RETURN_IF_ERROR(ctx_.backend->CopyFromHost(
        ConstTensorView{meta.data() + part * n, DType::kI64, Shape{n}}, SliceRows(dst, 0, n)));
  }
  ctx_.stats.decode_layers += ctx_.config().num_hidden_layers;
  if (ctx_.options.decode_graphs == DecodeGraphs::kUnrecorded) return RunBody(entries);

  switch (graphs_.Next(key)) {
    case DecodeGraphCache::Action::kReplay:
      ++ctx_.stats.replayed_steps;
      return ctx_.backend->Replay(*graphs_.Find(key));
    case DecodeGraphCache::Action::kRecord: {
      if (!ctx_.backend->BeginCapture().ok()) {
        graphs_.Refuse(key);
        break;
      }
      const Status body = RunBody(entries);
      StatusOr<std::unique_ptr<RecordedOps>> ops = ctx_.backend->EndCapture();
      if (!body.ok() || !ops.ok()) {
        // Something in the step may not be recorded: run its steps as usual from now on.
        graphs_.Refuse(key);
        break;
      }
      graphs_.Store(key, std::move(ops).value());
      ++ctx_.stats.recorded_steps;
      ++ctx_.stats.replayed_steps;
      return ctx_.backend->Replay(*graphs_.Find(key));
    }
    case DecodeGraphCache::Action::kRun:
      break;
  }
  return RunBody(entries);
}

}  // namespace millipede
