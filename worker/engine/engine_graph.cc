// Recorded decode steps (decode graphs, see decode_graphs.h): a decode-only step on one rank is
// run by replaying a recording of its ops. Before each step the host uploads what changes from
// token to token — ids, positions, each token's cache row and each sequence's rows after the
// step — and the recorded ops read them: RoPE stores each token at its uploaded row of the whole
// store (RopeKvArgs::cache_rows) and attention spans the sequence's bucket of rows, limited to its
// uploaded length (BatchDecodeAttentionArgs::lengths).
#include <vector>

#include "worker/engine/engine_entry.h"

namespace millipede {

const char* DecodeGraphsName(DecodeGraphs mode) {
  switch (mode) {
    case DecodeGraphs::kAuto: return "auto";
    case DecodeGraphs::kOff: return "off";
    case DecodeGraphs::kUnrecorded: return "unrecorded";
  }
  return "?";
}

StatusOr<DecodeGraphs> ParseDecodeGraphs(std::string_view name) {
  if (name == "auto") return DecodeGraphs::kAuto;
  if (name == "off") return DecodeGraphs::kOff;
  if (name == "unrecorded") return DecodeGraphs::kUnrecorded;
  return InvalidArgumentError("decode graphs: '" + std::string(name) +
                              "' is not auto, off or unrecorded");
}

bool Engine::Recordable(const std::vector<Entry>& entries) const {
  if (options_.decode_graphs == DecodeGraphs::kOff ||
      (options_.decode_graphs == DecodeGraphs::kAuto && backend_->kind() != BackendKind::kCuda))
    return false;
  const ModelConfig& c = config();
  if (comm_->size() != 1 || options_.profile || options_.attention_observer || entries.empty() ||
      !backend_->DecodeTakesLengths(c.head_dim, c.num_attention_heads / c.num_key_value_heads,
                                    options_.kv_dtype) ||
      c.num_key_value_heads > 64)  // the attention kernels' window table
    return false;
  for (const Entry& e : entries) {
    if (e.prefill() || e.stored_rows() != 1) return false;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      const KvStore& store = e.seq->kv(l);
      if (!e.seq->attention(l).decode->recordable() || store.fixed_capacity() <= store.held_rows())
        return false;
    }
  }
  return true;
}

Status Engine::RunDecodeBody(std::vector<Entry>& entries) {
  const int64_t rows = static_cast<int64_t>(entries.size());
  MP_RETURN_IF_ERROR(EmbedUploaded(rows));
  StepProfiler off(*backend_, false);
  for (int64_t layer = 0; layer < config().num_hidden_layers; ++layer)
    MP_RETURN_IF_ERROR(RunLayer(layer, entries, rows, off));
  return ComputeLogits(entries);
}

Status Engine::RunRecordable(std::vector<Entry>& entries) {
  const int64_t n = static_cast<int64_t>(entries.size());
  Workspace& ws = *workspace_;
  // Each token's cache row (the store's held rows), its sequence's rows after the step and those
  // after its context; the key: the sequences, their buckets and RoPE tables, the buffers' epochs.
  std::vector<int64_t> meta(static_cast<size_t>(3 * n));
  DecodeGraphKey key;
  for (int64_t i = 0; i < n; ++i) {
    Entry& e = entries[static_cast<size_t>(i)];
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
  key.values.push_back(static_cast<int64_t>(backend_->memory_epoch()));
  MP_RETURN_IF_ERROR(UploadIds(entries, n));
  for (int64_t part = 0; part < 3; ++part) {
    MP_ASSIGN_OR_RETURN(TensorView dst, Reshape(SliceRows(ws.decode_meta.view(), part, 1),
                                                Shape{ws.step_rows()}));
    MP_RETURN_IF_ERROR(backend_->CopyFromHost(
        ConstTensorView{meta.data() + part * n, DType::kI64, Shape{n}}, SliceRows(dst, 0, n)));
  }
  stats_.decode_layers += config().num_hidden_layers;
  if (options_.decode_graphs == DecodeGraphs::kUnrecorded) return RunDecodeBody(entries);

  switch (graphs_.Next(key)) {
    case DecodeGraphCache::Action::kReplay:
      ++stats_.replayed_steps;
      return backend_->Replay(*graphs_.Find(key));
    case DecodeGraphCache::Action::kRecord: {
      if (!backend_->BeginCapture().ok()) {
        graphs_.Refuse(key);
        break;
      }
      const Status body = RunDecodeBody(entries);
      StatusOr<std::unique_ptr<RecordedOps>> ops = backend_->EndCapture();
      if (!body.ok() || !ops.ok()) {
        // Something in the step may not be recorded: run its steps as usual from now on.
        graphs_.Refuse(key);
        break;
      }
      graphs_.Store(key, std::move(ops).value());
      ++stats_.recorded_steps;
      ++stats_.replayed_steps;
      return backend_->Replay(*graphs_.Find(key));
    }
    case DecodeGraphCache::Action::kRun:
      break;
  }
  return RunDecodeBody(entries);
}

}  // namespace millipede
