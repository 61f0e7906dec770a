#include "worker/engine/sequence.h"

#include <algorithm>
#include <limits>

#include "worker/kv/device_kv_store.h"
#include "worker/kv/streaming_kv_store.h"

namespace millipede {
namespace {

KvLayout Layout(const ModelConfig& c, DType kv_dtype) {
  return KvLayout{c.num_key_value_heads, c.head_dim, kv_dtype};
}

int64_t StepRows(const SequenceOptions& o) {
  return std::max<int64_t>(1, o.step_tokens > 0 ? o.step_tokens : o.capacity);
}


}  // namespace

StatusOr<int64_t> Sequence::StoreBytes(const ModelConfig& config, DType kv_dtype,
                                       const SequenceOptions& options) {
  MP_RETURN_IF_ERROR(
      ValidateAttentionPolicy(options.policy, config.num_hidden_layers, config.num_key_value_heads));
  const KvLayout layout = Layout(config, kv_dtype);
  int64_t bytes = 0;
  // A layer whose store drops rows gets a streaming store: what attention sees is what it keeps.
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    const KvRetention r = LayerKvRetention(options.policy, l);
    bytes += r.KeepsAll() ? DeviceKvStore::BytesFor(layout, options.capacity)
                          : StreamingKvStore::BytesFor(layout, r, StepRows(options));
  }
  return bytes;
}

StatusOr<std::unique_ptr<Sequence>> Sequence::Create(SequenceId id, Backend& backend,
                                                     const ModelConfig& config, DType kv_dtype,
                                                     SequenceOptions options) {
  MP_REQUIRE(options.capacity > 0, "sequence capacity must be positive, got ",
             options.capacity);
  auto s = std::unique_ptr<Sequence>(new Sequence());
  s->id_ = id;
  MP_ASSIGN_OR_RETURN(s->layers_, BuildLayerAttention(options.policy, config));
  const KvLayout layout = Layout(config, kv_dtype);
  for (const LayerAttention& la : s->layers_) {
    std::unique_ptr<KvStore> store;
    if (!la.retention.KeepsAll()) {
      MP_ASSIGN_OR_RETURN(store, StreamingKvStore::Create(backend, layout, la.retention,
                                                          StepRows(options)));
    } else {
      MP_ASSIGN_OR_RETURN(store, DeviceKvStore::Create(backend, layout, options.capacity));
    }
    s->stores_.push_back(std::move(store));
  }
  s->options_ = std::move(options);
  return s;
}

int64_t Sequence::MaxStepRows() const {
  for (const LayerAttention& la : layers_)
    if (!la.retention.KeepsAll()) return StepRows(options_);
  return std::numeric_limits<int64_t>::max();
}

int64_t Sequence::KvBytes() const {
  int64_t bytes = 0;
  for (const auto& s : stores_) bytes += s->NumBytes();
  return bytes;
}

std::vector<TokenRange> Sequence::BlockRanges(const KvRetention& retention,
                                              std::span<const TokenRange> stored, int64_t length,
                                              std::span<const TokenRange> step) {
  std::vector<TokenRange> ranges = retention.Kept(stored, length);
  for (const TokenRange& r : step) AppendRange(&ranges, r);
  return ranges;
}

Status Sequence::Commit(std::span<const TokenRange> step, int64_t length) {
  for (auto& store : stores_) MP_RETURN_IF_ERROR(store->Commit(step, length));
  for (const TokenRange& r : step) {
    AppendRange(&stored_, r);
    stored_rows_ += r.size();
  }
  length_ = length;
  return OkStatus();
}

}  // namespace millipede
