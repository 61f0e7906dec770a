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

// A layer whose store drops rows gets a streaming store: what attention sees is what it keeps.
bool UseStreamingStore(const KvRetention& r, const SequenceOptions&) { return !r.KeepsAll(); }

}  // namespace

StatusOr<int64_t> Sequence::StoreBytes(const ModelConfig& config, DType kv_dtype,
                                       const SequenceOptions& options) {
  MP_ASSIGN_OR_RETURN(std::vector<LayerAttention> layers,
                      BuildLayerAttention(options.policy, config));
  const KvLayout layout = Layout(config, kv_dtype);
  int64_t bytes = 0;
  for (const LayerAttention& la : layers)
    bytes += UseStreamingStore(la.retention, options)
                 ? StreamingKvStore::BytesFor(layout, la.retention, StepRows(options))
                 : DeviceKvStore::BytesFor(layout, options.capacity);
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
    if (UseStreamingStore(la.retention, options)) {
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
    if (UseStreamingStore(la.retention, options_)) return StepRows(options_);
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
