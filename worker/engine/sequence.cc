#include "worker/engine/sequence.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <optional>

#include "policy/head_groups.h"
#include "worker/attention/head_group_attention.h"
#include "worker/engine/saved_sequence.h"
#include "worker/kv/device_kv_store.h"
#include "worker/kv/head_group_kv_store.h"
#include "worker/kv/saved_kv_rows.h"
#include "worker/kv/streaming_kv_store.h"

namespace millipede {
namespace {

KvLayout Layout(const ModelConfig& c, DType kv_dtype) {
  return KvLayout{c.num_key_value_heads, c.head_dim, kv_dtype};
}

int64_t StepRows(const SequenceOptions& o) {
  return std::max<int64_t>(1, o.step_tokens > 0 ? o.step_tokens : o.capacity);
}

// A host-tier layer's rows: its context in host memory, its generated rows on the device.
int64_t ContextCapacity(const SequenceOptions& o) {
  return o.decode_rows >= 0 ? std::max<int64_t>(1, o.capacity - o.decode_rows) : o.capacity;
}
int64_t GeneratedCapacity(const SequenceOptions& o) {
  return o.decode_rows >= 0 ? std::max<int64_t>(1, o.decode_rows) : o.capacity;
}

DecodeRole Role(const AttentionPolicy& p, size_t l) { return p.layers[l].LayerDecode(); }

// Rows of the host-tier layers' window (offloaded_kv_store.h): the context capacity when a
// prefill step may follow held rows (several steps, or a cached prefix first), else none.
int64_t WindowRows(const SequenceOptions& o) {
  return o.cached_prefix || StepRows(o) < ContextCapacity(o) ? ContextCapacity(o) : 0;
}

// Whether each layer's context rows go to the host tier: with kHost, the first
// host_tier_layers of HostTierCandidates.
std::vector<bool> HostTierLayers(const SequenceOptions& o) {
  std::vector<bool> host(o.policy.layers.size(), false);
  if (o.selected_kv != SelectedKvTier::kHost) return host;
  const std::vector<int64_t> candidates = HostTierCandidates(o.policy);
  const size_t n = o.host_tier_layers < 0 ? candidates.size()
                                          : std::min(candidates.size(),
                                                     static_cast<size_t>(o.host_tier_layers));
  for (size_t i = 0; i < n; ++i) host[static_cast<size_t>(candidates[i])] = true;
  return host;
}

// What one layer's sparse prefill needs of the engine's SparsePrefillScratch (0 for a layer
// without vertical-slash, block-sparse or antidiagonal heads) in steps of StepRows rows over this
// sequence's rows, index chunks of `attention_rows` query rows. Per KV head the vertical-slash
// plan's key scores (F32) over this rank's rows, its diagonal sums over every position and the
// keys' positions (I64); the block-sparse plan's block sums of queries and keys [blocks, kv_heads,
// d] (F32); one chunk's index lists, estimated at twice 16 bytes per 64-row tile and KV head for
// each `vertical` column and one range per 64 slash diagonals, or each of `top_blocks` key
// blocks, or every block for antidiagonal heads (the estimate is not a bound); the antidiagonal
// plan's kept bitmaps, its GPU selection's reshaped keys and scores, and with several ranks every
// key gathered (twice: fetched, then in one buffer) and the queries of shared blocks; one chunk's
// partial (o, lse); and with ring heads (dense, A-shape) beside the sparse ones, their queries,
// output and K/V packed apart.
int64_t LayerSparseBytes(const ModelConfig& config, int64_t kv_elem, const SequenceOptions& o,
                         const LayerPolicy& layer, int64_t attention_rows) {
  const int64_t kv_heads = config.num_key_value_heads, d = config.head_dim;
  const int64_t heads = config.num_attention_heads, group = heads / kv_heads;
  const int64_t positions = o.capacity * std::max<int64_t>(1, o.ranks);
  const int64_t n = StepRows(o), chunk = std::min(n, std::max<int64_t>(attention_rows, 64));
  int64_t per_tile = 0, ring_heads = 0, block = 0, ad_block = 0;
  bool vertical_slash = false;
  for (const HeadPrefillPolicy& h : layer.prefill) {
    switch (h.pattern) {
      case PrefillPattern::kVerticalSlash:
        vertical_slash = true;
        per_tile = std::max(per_tile, h.vertical_slash.vertical + h.vertical_slash.slash / 64 + 1);
        break;
      case PrefillPattern::kBlockSparse:
        block = std::max<int64_t>(1, h.block_sparse.block);
        per_tile = std::max(per_tile, h.block_sparse.top_blocks + 1);
        break;
      case PrefillPattern::kAntidiagonal:  // any block may be kept: the most it could be
        ad_block = std::max<int64_t>(1, h.antidiagonal.block);
        per_tile = std::max(per_tile, positions / ad_block + 1);
        break;
      default:
        ++ring_heads;
    }
  }
  if (per_tile == 0) return 0;
  // A chunk's tiles: its rows in 64-row tiles, and one more wherever the step's ranges cut one.
  const int64_t tiles = (chunk + 63) / 64 + 2 * std::max<int64_t>(1, o.ranks);
  int64_t bytes = 2 * tiles * kv_heads * per_tile * 16 + chunk * heads * (d + 1) * 4;
  if (vertical_slash) bytes += kv_heads * (o.capacity + positions) * 4 + o.capacity * 8;
  if (block > 0) bytes += 2 * ((positions + block - 1) / block) * (kv_heads * d + 1) * 4;
  if (ad_block > 0) {
    const int64_t blocks = (positions + ad_block - 1) / ad_block;
    bytes += kv_heads * blocks * (blocks / 32 + 1) * 4;  // the kept bitmaps
    // The GPU's selection: every key reshaped in bf16, and one slab of fp32 scores (1 GiB).
    bytes += positions * kv_heads * d * 2 + (int64_t{1} << 30);
    if (o.ranks > 1)  // every key fetched and gathered; the shared blocks' queries
      bytes += 2 * positions * kv_heads * d * kv_elem + 4 * o.ranks * ad_block * heads * d * 4;
  }
  if (ring_heads > 0) {
    const int64_t packed = ring_heads * group;
    bytes += 2 * (n * packed + 1) * (d + 1) * 4 +         // queries; output and LSE
             2 * o.capacity * ring_heads * d * kv_elem +  // their K and V
             std::max({n * packed, o.capacity * ring_heads, chunk * heads}) * 8 +  // gathers
             chunk * heads * (d + 1) * 4;  // one chunk's output unpacked
  }
  return bytes;
}

// The sparse prefill scratch this sequence needs: its widest layer's (every layer uses the same
// buffers, sparse_prefill_scratch.h).
int64_t SparsePrefillBytes(const ModelConfig& config, DType kv_dtype, const SequenceOptions& o,
                           int64_t attention_rows) {
  const int64_t kv_elem = static_cast<int64_t>(DTypeSize(kv_dtype));
  int64_t bytes = 0;
  for (const LayerPolicy& layer : o.policy.layers)
    bytes = std::max(bytes, LayerSparseBytes(config, kv_elem, o, layer, attention_rows));
  return bytes;
}

// One FP8 attention call's operands (AttentionFp8CudaWorkspaceBytes, less its split partials,
// which the reserve covers like those of exact attention): K and V in E4M3 over the sequence's
// rows on this rank (no call sees more: one rank's block, or this rank's own rows), padded to
// 128 keys, and the scales, each part 256-byte aligned.
int64_t Fp8AttentionBytes(const ModelConfig& config, const SequenceOptions& o) {
  const int64_t width = config.num_key_value_heads * config.head_dim;
  const int64_t blocks = (o.capacity + 127) / 128 + 1;
  return 2 * blocks * 128 * width + config.num_key_value_heads * blocks * 4 + width * 4 + 4 * 256;
}

// Per filter layer (by index): its group's host-tier layers, and whether the group has selected
// layers on the device.
struct SelectionGroup {
  size_t filter = 0;
  std::vector<int64_t> host_layers;
  bool device_layers = false;
};
std::vector<SelectionGroup> SelectionGroups(const SequenceOptions& o) {
  const std::vector<bool> host = HostTierLayers(o);
  std::vector<SelectionGroup> groups;
  for (size_t l = 0; l < o.policy.layers.size(); ++l) {
    const DecodeRole r = Role(o.policy, l);
    if (r == DecodeRole::kFilter) groups.push_back({l, {}, false});
    if (r != DecodeRole::kSelected || groups.empty()) continue;
    if (host[l]) {
      groups.back().host_layers.push_back(static_cast<int64_t>(l));
    } else {
      groups.back().device_layers = true;
    }
  }
  return groups;
}

// A group's host tier: its arena, K then V of each of its `layers` host-tier layers (so that one
// gather loads them all) [2 * layers * context capacity, kv_heads, head_dim] in pinned host
// memory, and the packed buffer its loads fill (backend memory).
struct HostTierBuffers {
  BackendTensor arena, packed;
};
StatusOr<HostTierBuffers> AllocateHostTier(Backend& backend, const KvLayout& layout,
                                           const SequenceOptions& o, size_t layers) {
  const int64_t context = ContextCapacity(o);
  const int64_t loaded = std::min(o.policy.filter.top_k, context);
  const int64_t blocks = 2 * static_cast<int64_t>(layers);
  HostTierBuffers b;
  MP_ASSIGN_OR_RETURN(
      b.arena, backend.AllocateHost(layout.dtype,
                                    Shape{blocks * context, layout.num_kv_heads, layout.head_dim}));
  MP_ASSIGN_OR_RETURN(
      b.packed, backend.Allocate(layout.dtype,
                                 Shape{blocks * loaded * layout.num_kv_heads, layout.head_dim}));
  return b;
}

}  // namespace

const char* SelectedKvTierName(SelectedKvTier tier) {
  switch (tier) {
    case SelectedKvTier::kAuto: return "auto";
    case SelectedKvTier::kDevice: return "device";
    case SelectedKvTier::kHost: return "host";
  }
  return "?";
}

StatusOr<SelectedKvTier> ParseSelectedKvTier(std::string_view name) {
  if (name == "auto") return SelectedKvTier::kAuto;
  if (name == "device") return SelectedKvTier::kDevice;
  if (name == "host") return SelectedKvTier::kHost;
  return InvalidArgumentError("unknown tier for selected layers \"" + std::string(name) +
                              "\" (auto, device, host)");
}

bool Sequence::SplitsKvHeads(const SequenceOptions& options) {
  return options.split_kv_heads &&
         millipede::SplitsKvHeads(options.policy, options.capacity, StepRows(options));
}

Status Sequence::PlanStores(const ModelConfig& config, DType kv_dtype,
                            const SequenceOptions& options, int64_t attention_rows,
                            SequenceMemoryPlan* plan) {
  MP_RETURN_IF_ERROR(
      ValidateAttentionPolicy(options.policy, config.num_hidden_layers, config.num_key_value_heads));
  const KvLayout layout = Layout(config, kv_dtype);
  const int64_t row = layout.RowBytes(), kv_heads = config.num_key_value_heads;
  const std::vector<bool> host = HostTierLayers(options);
  plan->kv_bytes = plan->host_kv_bytes = plan->selection_bytes = plan->head_group_bytes = 0;
  plan->index_bytes = SparsePrefillBytes(config, kv_dtype, options, attention_rows);
  plan->fp8_bytes = options.policy.fp8_attention ? Fp8AttentionBytes(config, options) : 0;
  const bool split = SplitsKvHeads(options);
  int64_t widest_pack = 0;
  // A layer whose store drops rows gets a streaming store: what attention sees is what it keeps.
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    const KvRetention r = LayerKvRetention(options.policy, l);
    const KvHeadGroups groups = split ? LayerHeadGroups(options.policy, l) : KvHeadGroups{};
    if (!groups.empty()) {
      plan->kv_bytes +=
          HeadGroupKvStore::BytesFor(layout, groups, StreamingHeadRetention(options.policy),
                                     options.capacity, StepRows(options));
      widest_pack = std::max<int64_t>(
          widest_pack, static_cast<int64_t>(std::max(groups.full.size(), groups.streaming.size())));
    } else if (host[static_cast<size_t>(l)]) {
      plan->kv_bytes += OffloadedKvStore::DeviceBytesFor(layout, GeneratedCapacity(options));
      plan->host_kv_bytes += row * ContextCapacity(options);
    } else {
      plan->kv_bytes += r.KeepsAll() ? DeviceKvStore::BytesFor(layout, options.capacity)
                                     : StreamingKvStore::BytesFor(layout, r, StepRows(options));
    }
  }
  if (std::count(host.begin(), host.end(), true) > 0)
    plan->kv_bytes += KvStagingPool::BytesFor(layout, StepRows(options), WindowRows(options));
  if (widest_pack > 0) {
    // The staging rows of every head; the packs of a prefill step's widest group, or of every
    // query head of a decode token.
    const int64_t group = config.num_attention_heads / kv_heads;
    const int64_t packed_rows =
        std::max(StepRows(options) * widest_pack * group, config.num_attention_heads);
    plan->head_group_bytes =
        row * StepRows(options) + HeadPackScratch::BytesFor(1, packed_rows, config.head_dim);
  }
  // Per filter layer: its scores, top-k columns and values, chosen rows, the gather index (one
  // block per host-tier K or V, at least one) and head counts; the rows it chooses gathered on the
  // device (K and V) for its device-tier layers and loaded into one packed buffer for its
  // host-tier ones. Over several ranks each rank's top-k offers min(top_k, context) rows per head
  // (the same count on every rank), as 64-bit keys all-gathered from every rank.
  const int64_t budget = std::min(options.policy.filter.top_k, options.capacity);
  const int64_t loaded = std::min(options.policy.filter.top_k, ContextCapacity(options));
  const int64_t ranks = std::max<int64_t>(1, options.ranks);
  const int64_t offered =
      ranks > 1 ? std::min(options.policy.filter.top_k, ranks * options.capacity) : budget;
  const int64_t keys = ranks > 1 ? kv_heads * offered * 8 * (1 + ranks) : 0;
  for (const SelectionGroup& g : SelectionGroups(options)) {
    const int64_t n = static_cast<int64_t>(g.host_layers.size());
    plan->selection_bytes += kv_heads * options.capacity * 4 + kv_heads * offered * 8 +
                             kv_heads * budget * 4 + keys +
                             std::max<int64_t>(1, 2 * n) * budget * kv_heads * 8 + kv_heads * 4;
    if (g.device_layers) plan->selection_bytes += budget * row;
    plan->selection_bytes += n * loaded * row;
  }
  // Static eviction's layers: the kept rows' index and counts of each (the rows stay in the
  // store), copies of the kept rows where K/V are F32 (a GPU's batched kernel reads no index
  // then), and once the scores, positions and top-k of one layer's prefill step (returned to the
  // scratch pool after it).
  const int64_t evicting = std::count_if(
      options.policy.layers.begin(), options.policy.layers.end(),
      [](const LayerPolicy& l) { return l.LayerDecode() == DecodeRole::kStaticEviction; });
  if (evicting > 0) {
    const int64_t keep = std::min(options.policy.static_eviction.keep_tokens, options.capacity);
    const int64_t copies = kv_dtype == DType::kF32 ? keep * row : 0;
    plan->selection_bytes += evicting * (keep * kv_heads * 8 + kv_heads * 4 + copies) +
                             kv_heads * options.capacity * 4 + 2 * options.capacity * 8 +
                             2 * keep * kv_heads * 8;
  }
  return OkStatus();
}

namespace {

// Whether a layer of `policy` has vertical-slash or block-sparse prefill heads (their pairs are
// counted on the backend).
bool HasSparseHeads(const AttentionPolicy& policy) {
  for (const LayerPolicy& l : policy.layers)
    for (const HeadPrefillPolicy& h : l.prefill)
      if (IsDynamicSparse(h.pattern))
        return true;
  return false;
}

// Layer `layer`'s store of `share` that a new store of rows of `row_bytes` can map (every row in
// backend memory): the layer's store, or the full heads' of a store per group of heads; any
// row size with row_bytes 0.
const DeviceKvStore* SharedStore(const Sequence* share, int64_t layer, int64_t row_bytes = 0) {
  if (share == nullptr || layer >= share->num_layers()) return nullptr;
  const KvStore* store = &share->kv(layer);
  if (const auto* groups = dynamic_cast<const HeadGroupKvStore*>(store))
    store = &groups->group(HeadGroupKvStore::kFull);
  const auto* device = dynamic_cast<const DeviceKvStore*>(store);
  if (device == nullptr || (row_bytes > 0 && device->NumBytes() / device->capacity() != row_bytes))
    return nullptr;
  return device;
}

}  // namespace

int64_t Sequence::SharedBytes(const Sequence& share, int64_t share_length) {
  const int64_t prefix_rows = TotalSize(RangesBefore(share.stored_, share_length));
  int64_t bytes = 0;
  for (int64_t l = 0; l < share.num_layers(); ++l) {
    const DeviceKvStore* from = SharedStore(&share, l);
    if (from == nullptr || from->held_rows() == 0) continue;
    const int64_t row_bytes = from->NumBytes() / from->capacity();
    bytes += DeviceKvStore::ShareableRows(*from, prefix_rows) * row_bytes;
  }
  return bytes;
}

StatusOr<std::unique_ptr<Sequence>> Sequence::Create(SequenceId id, Backend& backend,
                                                     const ModelConfig& config, DType kv_dtype,
                                                     SequenceOptions options, const Sequence* share,
                                                     int64_t share_length) {
  MP_REQUIRE(options.capacity > 0, "sequence capacity must be positive, got ",
             options.capacity);
  const int64_t share_prefix_rows =
      share != nullptr ? TotalSize(RangesBefore(share->stored_, share_length)) : 0;
  auto s = std::unique_ptr<Sequence>(new Sequence());
  s->id_ = id;
  MP_ASSIGN_OR_RETURN(s->layers_, BuildLayerAttention(options.policy, config, options.ranks,
                                                       SplitsKvHeads(options)));
  const KvLayout layout = Layout(config, kv_dtype);
  const std::vector<bool> host = HostTierLayers(options);
  if (std::count(host.begin(), host.end(), true) > 0) {
    MP_ASSIGN_OR_RETURN(s->staging_, KvStagingPool::Create(backend, layout, StepRows(options),
                                                           WindowRows(options)));
  }
  for (const SelectionGroup& g : SelectionGroups(options)) {
    if (g.host_layers.empty()) continue;
    MP_ASSIGN_OR_RETURN(HostTierBuffers buffers,
                        AllocateHostTier(backend, layout, options, g.host_layers.size()));
    s->layers_[g.filter].selection->SetHostTier(g.host_layers, std::move(buffers.arena),
                                                ContextCapacity(options),
                                                std::move(buffers.packed));
  }
  for (size_t l = 0; l < s->layers_.size(); ++l) {
    const LayerAttention& la = s->layers_[l];
    std::unique_ptr<KvStore> store;
    if (!la.head_groups.empty()) {
      if (s->head_staging_ == nullptr) {
        MP_ASSIGN_OR_RETURN(KvBuffer staging,
                            KvBuffer::Create(backend, layout, StepRows(options)));
        s->head_staging_ = std::make_shared<KvBuffer>(std::move(staging));
      }
      const KvLayout full{static_cast<int64_t>(la.head_groups.full.size()), layout.head_dim,
                          layout.dtype};
      const DeviceKvStore* from = SharedStore(share, static_cast<int64_t>(l), full.RowBytes());
      const int64_t rows = from ? DeviceKvStore::ShareableRows(*from, share_prefix_rows) : 0;
      MP_ASSIGN_OR_RETURN(store, HeadGroupKvStore::Create(backend, layout, la.head_groups,
                                                          la.streaming, options.capacity,
                                                          StepRows(options), s->head_staging_,
                                                          rows > 0 ? from : nullptr, rows));
    } else if (host[l]) {
      const std::vector<int64_t>& group = la.selection->host_layers();
      const size_t i = static_cast<size_t>(
          std::find(group.begin(), group.end(), static_cast<int64_t>(l)) - group.begin());
      MP_ASSIGN_OR_RETURN(std::unique_ptr<OffloadedKvStore> offloaded,
                          OffloadedKvStore::Create(backend, layout, la.selection->HostRows(i),
                                                   s->staging_, GeneratedCapacity(options)));
      s->offloaded_.push_back(offloaded.get());
      store = std::move(offloaded);
    } else if (!la.retention.KeepsAll()) {
      MP_ASSIGN_OR_RETURN(store, StreamingKvStore::Create(backend, layout, la.retention,
                                                          StepRows(options)));
    } else {
      const DeviceKvStore* from = SharedStore(share, static_cast<int64_t>(l), layout.RowBytes());
      const int64_t rows = from ? DeviceKvStore::ShareableRows(*from, share_prefix_rows) : 0;
      MP_ASSIGN_OR_RETURN(store, DeviceKvStore::Create(backend, layout, options.capacity,
                                                       rows > 0 ? from : nullptr, rows));
    }
    s->stores_.push_back(std::move(store));
  }
  const bool sparse = HasSparseHeads(options.policy);
  s->options_ = std::move(options);
  if (sparse) {
    MP_ASSIGN_OR_RETURN(s->pairs_device_, backend.Allocate(DType::kI64, Shape{1}));
    const int64_t zero = 0;
    MP_RETURN_IF_ERROR(
        backend.CopyFromHost({&zero, DType::kI64, Shape{1}}, s->pairs_device_.view()));
    s->pairs_.device = s->pairs_device_.view();
  }
  return s;
}

StatusOr<int64_t> Sequence::AttendedPairs(Backend& backend) const {
  int64_t device = 0;
  if (pairs_.device.data != nullptr)
    MP_RETURN_IF_ERROR(
        backend.CopyToHost(AsConst(pairs_.device), {&device, DType::kI64, Shape{1}}));
  return pairs_.host + device;
}

int64_t Sequence::MaxStepRows() const {
  for (const LayerAttention& la : layers_)
    if (!la.retention.KeepsAll() || !la.head_groups.empty()) return StepRows(options_);
  return std::numeric_limits<int64_t>::max();
}

int64_t Sequence::KvBytes() const {
  int64_t bytes = staging_ != nullptr ? staging_->NumBytes() : 0;
  if (head_staging_ != nullptr) bytes += head_staging_->NumBytes();
  for (const auto& s : stores_) bytes += s->NumBytes();
  return bytes;
}

int64_t Sequence::SharedKvBytes() const {
  int64_t bytes = 0;
  for (int64_t l = 0; l < num_layers(); ++l)
    if (const DeviceKvStore* d = SharedStore(this, l); d != nullptr && d->shared_rows() > 0)
      bytes += d->shared_rows() * (d->NumBytes() / d->capacity());
  return bytes;
}

int64_t Sequence::HostKvBytes() const {
  int64_t bytes = 0;
  for (const OffloadedKvStore* s : offloaded_) bytes += s->HostBytes();
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

Status Sequence::RestoreLayers(int64_t length, const SourceShape& src,
                               const std::function<Status(int64_t, std::span<const TokenRange>)>&
                                   restore_layer) {
  MP_REQUIRE(length_ == 0 && stored_rows_ == 0 && !decoding_,
             "sequence ", id_, ": a prefix is restored before its first step only");
  MP_REQUIRE(length >= 1 && length <= src.length, "sequence ", id_, ": a prefix of ", length,
             " positions from a cached sequence of ", src.length);
  MP_REQUIRE(src.layers == num_layers(), "sequence ", id_,
             ": the cached sequence has another number of layers");
  const std::vector<TokenRange> stored = RangesBefore(src.stored, length);
  for (int64_t l = 0; l < num_layers(); ++l) {
    Status s = restore_layer(l, stored);
    if (!s.ok())
      return Status(s.code(), "layer " + std::to_string(l) + ": " + std::string(s.message()));
  }
  stored_ = stored;
  stored_rows_ = TotalSize(stored);
  length_ = length;
  return OkStatus();
}

Status Sequence::RestorePrefix(Backend& backend, const Sequence& src, int64_t length) {
  return RestoreLayers(length, {src.length_, src.num_layers(), src.stored_},
                       [&](int64_t l, std::span<const TokenRange> stored) {
                         return kv(l).RestoreFrom(backend, src.kv(l), stored, length);
                       });
}

Status Sequence::RestorePrefix(Backend& backend, const SavedSequence& src, int64_t length) {
  return RestoreLayers(
      length, {src.length(), src.num_layers(), src.stored()},
      [&](int64_t l, std::span<const TokenRange> stored) -> Status {
        const std::vector<SavedKvRows>& parts = src.layer(l);
        if (static_cast<int64_t>(parts.size()) != kv(l).num_parts())
          return FailedPreconditionError("the saved KV was kept in another kind of store");
        for (size_t p = 0; p < parts.size(); ++p)
          MP_RETURN_IF_ERROR(
              kv(l).LoadRows(backend, static_cast<int64_t>(p), parts[p], stored, length));
        return OkStatus();
      });
}

namespace {

// Whether `store` (each group of a head-group store) may forget its rows from `length` on.
Status CheckTruncatable(const KvStore& store, std::span<const TokenRange> stored,
                        int64_t length) {
  if (const auto* groups = dynamic_cast<const HeadGroupKvStore*>(&store)) {
    MP_RETURN_IF_ERROR(CheckTruncatable(groups->group(HeadGroupKvStore::kFull), stored, length));
    return CheckTruncatable(groups->group(HeadGroupKvStore::kStreaming), stored, length);
  }
  MP_ASSIGN_OR_RETURN(const std::vector<TokenRange> kept, CheckHeldRows(store, stored, length));
  const auto* device = dynamic_cast<const DeviceKvStore*>(&store);
  if (device != nullptr && device->SharedFrom(TotalSize(kept)))
    return FailedPreconditionError(
        "the cached KV's rows after the prefix are shared with another sequence");
  return OkStatus();
}

}  // namespace

Status Sequence::CanTakeOver(const SequenceOptions& options, int64_t length) const {
  MP_REQUIRE(length >= 1 && length <= length_, "sequence ", id_, ": a prefix of ", length,
             " positions from a cached sequence of ", length_);
  if (!(options.policy == options_.policy))
    return FailedPreconditionError("the cached sequence ran another attention policy");
  if (options.capacity > options_.capacity || options.step_tokens > options_.step_tokens)
    return FailedPreconditionError(
        "the cached sequence has room for " + std::to_string(options_.capacity) +
        " positions and steps of " + std::to_string(options_.step_tokens) + ", not " +
        std::to_string(options.capacity) + " and " + std::to_string(options.step_tokens));
  // Its context rows are the coordinator's to fit (a take reserves no more than the entry's).
  for (const OffloadedKvStore* s : offloaded_)
    if (GeneratedCapacity(options) > s->generated_capacity())
      return FailedPreconditionError(
          "the cached sequence's host-tier layers have room for " +
          std::to_string(s->generated_capacity()) + " generated rows, not " +
          std::to_string(GeneratedCapacity(options)));
  const std::vector<TokenRange> stored = RangesBefore(stored_, length);
  for (size_t l = 0; l < stores_.size(); ++l) {
    Status s = CheckTruncatable(*stores_[l], stored, length);
    if (!s.ok())
      return Status(s.code(), "layer " + std::to_string(l) + ": " + std::string(s.message()));
  }
  return OkStatus();
}

Status Sequence::TakeOver(Backend& backend, SequenceId id, const SequenceOptions& options,
                          int64_t length) {
  MP_RETURN_IF_ERROR(CanTakeOver(options, length));
  MP_RETURN_IF_ERROR(Rewind(backend, length));
  if (!offloaded_.empty()) {
    MP_RETURN_IF_ERROR(staging_->ReserveSlots(StepRows(options)));
    MP_RETURN_IF_ERROR(staging_->ReserveWindow(
        std::min(ContextCapacity(options), offloaded_.front()->context_capacity())));
  }
  id_ = id;
  options_.decode_rows = options.decode_rows;
  return OkStatus();
}

Status Sequence::Rewind(Backend& backend, int64_t length) {
  if (pairs_.device.data != nullptr) {
    const int64_t zero = 0;
    MP_RETURN_IF_ERROR(backend.CopyFromHost({&zero, DType::kI64, Shape{1}}, pairs_.device));
  }
  pairs_.host = 0;
  const std::vector<TokenRange> stored = RangesBefore(stored_, length);
  for (size_t l = 0; l < stores_.size(); ++l) {
    Status s = stores_[l]->Truncate(stored, length);
    if (!s.ok())
      return Status(s.code(), "layer " + std::to_string(l) + ": " + std::string(s.message()));
  }
  // Its context now runs on past the cached length: OmniKV chooses again from the new context.
  for (LayerAttention& la : layers_)
    if (la.selection != nullptr) la.selection->Reset();
  stored_ = stored;
  stored_rows_ = TotalSize(stored);
  length_ = length;
  decoding_ = false;
  decode_start_ = -1;
  causal_pairs = 0;
  return OkStatus();
}

namespace {

// `store`'s held rows, borrowed (not copied) as saved rows for another store's LoadRows, which
// only reads them; valid while `store` is unchanged.
StatusOr<SavedKvRows> BorrowRows(const KvStore& store) {
  MP_ASSIGN_OR_RETURN(const ConstKvRows rows, store.Rows(0));
  auto borrow = [](const ConstTensorView& t) {
    return BackendTensor(TensorView{const_cast<void*>(t.data), t.dtype, t.shape}, nullptr);
  };
  return SavedKvRows{.retention = store.retention(),
                     .ranges = store.held_ranges(),
                     .k = borrow(rows.k),
                     .v = borrow(rows.v)};
}

}  // namespace

Status Sequence::Relayout(Backend& backend, const ModelConfig& config, DType kv_dtype,
                          int64_t host_layers, int64_t slot_rows) {
  SequenceOptions next = options_;
  next.selected_kv = SelectedKvTier::kHost;
  next.host_tier_layers = host_layers;
  const std::vector<bool> after = HostTierLayers(next);
  if (after == HostTierLayers(options_)) return OkStatus();
  const int64_t length = decode_start_ >= 0 ? decode_start_ : length_;
  MP_REQUIRE(length >= 1, "sequence ", id_, ": nothing to lay out again");
  MP_RETURN_IF_ERROR(CanTakeOver(options_, length));
  MP_RETURN_IF_ERROR(Rewind(backend, length));
  const bool any_host = std::count(after.begin(), after.end(), true) > 0;
  std::shared_ptr<KvStagingPool> staging = any_host ? staging_ : nullptr;
  const KvLayout layout = Layout(config, kv_dtype);
  if (staging != nullptr) {
    MP_RETURN_IF_ERROR(staging->ResizeSlots(slot_rows));
  } else if (any_host) {
    MP_ASSIGN_OR_RETURN(staging, KvStagingPool::Create(backend, layout, slot_rows, 0));
  }
  // New stores for the layers changing tier and for every host-tier layer of a group whose
  // host-tier layers change (a new arena), all allocated before any row moves.
  const std::vector<SelectionGroup> before_groups = SelectionGroups(options_);
  const std::vector<SelectionGroup> groups = SelectionGroups(next);
  std::vector<std::optional<HostTierBuffers>> arenas(groups.size());
  std::vector<std::unique_ptr<KvStore>> fresh(stores_.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::vector<int64_t>& was = before_groups[g].host_layers;
    const std::vector<int64_t>& now = groups[g].host_layers;
    if (was == now) continue;
    if (!now.empty()) {
      MP_ASSIGN_OR_RETURN(arenas[g], AllocateHostTier(backend, layout, next, now.size()));
    } else {
      arenas[g].emplace();
    }
    for (size_t i = 0; i < now.size(); ++i) {
      MP_ASSIGN_OR_RETURN(
          fresh[static_cast<size_t>(now[i])],
          OffloadedKvStore::Create(
              backend, layout,
              TokenSelection::ArenaRows(arenas[g]->arena.view(), ContextCapacity(next), i), staging,
              GeneratedCapacity(next)));
    }
    for (int64_t l : was) {
      if (std::find(now.begin(), now.end(), l) != now.end()) continue;
      MP_ASSIGN_OR_RETURN(fresh[static_cast<size_t>(l)],
                          DeviceKvStore::Create(backend, layout, next.capacity));
    }
  }
  for (size_t l = 0; l < stores_.size(); ++l) {
    if (fresh[l] == nullptr) continue;
    MP_ASSIGN_OR_RETURN(const SavedKvRows rows, BorrowRows(*stores_[l]));
    Status s = fresh[l]->LoadRows(backend, 0, rows, stored_, length_);
    if (!s.ok())
      return Status(s.code(), "layer " + std::to_string(l) + ": " + std::string(s.message()));
  }
  // The copies out of the old stores and arenas are done before those are freed.
  MP_RETURN_IF_ERROR(backend.Synchronize());
  for (size_t g = 0; g < groups.size(); ++g) {
    if (!arenas[g]) continue;
    layers_[groups[g].filter].selection->SetHostTier(
        groups[g].host_layers, std::move(arenas[g]->arena), ContextCapacity(next),
        std::move(arenas[g]->packed));
  }
  offloaded_.clear();
  for (size_t l = 0; l < stores_.size(); ++l) {
    if (fresh[l] != nullptr) stores_[l] = std::move(fresh[l]);
    if (after[l]) offloaded_.push_back(static_cast<OffloadedKvStore*>(stores_[l].get()));
  }
  staging_ = std::move(staging);
  options_ = std::move(next);
  return OkStatus();
}

void Sequence::BeginDecode() {
  if (decoding_) return;
  decoding_ = true;
  decode_start_ = length_;
  for (LayerAttention& la : layers_)
    if (la.selection != nullptr) la.selection->BeginDecode(length_);
  for (OffloadedKvStore* s : offloaded_) s->EndContext();
}

}  // namespace millipede
