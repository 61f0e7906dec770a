#include "worker/attention/token_selection.h"

#include <algorithm>

#include "worker/attention/scratch_buffer.h"

namespace millipede {

void TokenSelection::SetHostTier(std::vector<int64_t> layers, BackendTensor arena, int64_t capacity,
                                 BackendTensor packed) {
  host_layers_ = std::move(layers);
  arena_ = std::move(arena);
  capacity_ = capacity;
  packed_ = std::move(packed);
}

KvRows TokenSelection::HostRows(size_t i) const {
  const int64_t block = static_cast<int64_t>(2 * i) * capacity_;
  return KvRows{SliceRows(arena_.view(), block, capacity_),
                SliceRows(arena_.view(), block + capacity_, capacity_)};
}

void TokenSelection::BeginDecode(int64_t context_end) {
  if (context_end_ < 0) context_end_ = context_end;
}

Status TokenSelection::Choose(AttentionEnv& env, std::vector<std::vector<int64_t>> rows,
                              int64_t context_rows, int64_t position) {
  const int64_t kv_heads = env.config.num_key_value_heads;
  MP_ASSERT(static_cast<int64_t>(rows.size()) == kv_heads, "one row list per KV head");
  position_ = -1;  // no valid choice until the load is on its way
  context_rows_ = context_rows;
  head_offset_.assign(1, 0);
  for (const std::vector<int64_t>& r : rows)
    head_offset_.push_back(head_offset_.back() + static_cast<int64_t>(r.size()));
  const int64_t total = head_offset_.back();
  by_row_ = total > 0 && std::all_of(rows.begin(), rows.end(),
                                     [&](const auto& r) { return r.size() == rows[0].size(); });
  std::vector<int64_t> index;
  index.reserve(static_cast<size_t>(total));
  const size_t per_head = rows[0].size();
  for (size_t i = 0; i < (by_row_ ? per_head : 0); ++i)
    for (int64_t g = 0; g < kv_heads; ++g) index.push_back(rows[g][i] * kv_heads + g);
  for (int64_t g = 0; g < (by_row_ ? 0 : kv_heads); ++g)
    for (int64_t row : rows[g]) index.push_back(row * kv_heads + g);
  for (int64_t e : index)
    MP_ASSERT(e >= 0 && e < context_rows * kv_heads, "chosen row ", e / kv_heads, " outside the ",
              context_rows, " context rows");
  if (total > 0) {
    MP_RETURN_IF_ERROR(UploadI64(env.backend, &index_, index).status());
    if (!host_layers_.empty()) MP_RETURN_IF_ERROR(StartLoad(env, index));
  }
  position_ = position;
  return OkStatus();
}

Status TokenSelection::StartLoad(AttentionEnv& env, const std::vector<int64_t>& index) {
  const int64_t d = env.config.head_dim, total = static_cast<int64_t>(index.size());
  // One gather for every host-tier layer of the group: block b of the arena (layer b / 2, K or
  // V) gives rows [b * total, (b + 1) * total) of the packed buffer.
  const int64_t blocks = 2 * static_cast<int64_t>(host_layers_.size());
  const int64_t block_rows = capacity_ * env.config.num_key_value_heads;
  MP_ASSERT(blocks * total <= packed_.view().dim(0), blocks * total,
            " chosen rows exceed the packed load buffer of ", packed_.view().dim(0));
  std::vector<int64_t> load(static_cast<size_t>(blocks * total));
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t i = 0; i < total; ++i)
      load[static_cast<size_t>(b * total + i)] = b * block_rows + index[static_cast<size_t>(i)];
  MP_ASSIGN_OR_RETURN(TensorView dev_load, UploadI64(env.backend, &load_index_, load));
  MP_ASSIGN_OR_RETURN(ConstTensorView src, Reshape(arena_.cview(), Shape{blocks * block_rows, d}));
  // After the compute queued so far: the index upload, and the previous step's readers of the
  // packed buffer.
  MP_ASSIGN_OR_RETURN(load_,
                      env.backend.StartGatherRows(
                          {src, AsConst(dev_load), SliceRows(packed_.view(), 0, blocks * total)},
                          CopyOrder::kAfterCompute));
  env.stats.host_load_bytes +=
      blocks * total * d * static_cast<int64_t>(DTypeSize(arena_.view().dtype));
  return OkStatus();
}

Status TokenSelection::CheckFresh(int64_t position, int64_t layer) const {
  if (position_ == position) return OkStatus();
  return FailedPreconditionError("selected layer " + std::to_string(layer) + ": its filter layer " +
                                 std::to_string(filter_layer_) + " chose no tokens for position " +
                                 std::to_string(position));
}

StatusOr<ConstKvRows> TokenSelection::Loaded(AttentionEnv& env, int64_t layer) {
  const auto it = std::find(host_layers_.begin(), host_layers_.end(), layer);
  MP_ASSERT(it != host_layers_.end(), "layer ", layer, " is not in the host tier");
  MP_RETURN_IF_ERROR(env.backend.ComputeWaitFor(load_));
  const int64_t i = it - host_layers_.begin(), total = total_rows();
  const ConstTensorView packed = packed_.cview();
  return ConstKvRows{SliceRows(packed, 2 * i * total, total),
                     SliceRows(packed, (2 * i + 1) * total, total)};
}

StatusOr<ConstKvRows> TokenSelection::Gather(AttentionEnv& env, ConstKvRows context) {
  const int64_t kv_heads = env.config.num_key_value_heads, d = env.config.head_dim;
  MP_ASSERT(context.k.dim(0) == context_rows_, "the layer's context rows (", context.k.dim(0),
            ") are not its filter layer's (", context_rows_, ")");
  const int64_t total = total_rows(), n = context_rows_ * kv_heads;
  MP_ASSIGN_OR_RETURN(TensorView k,
                      ScratchBuffer(env.backend, &gather_k_, context.k.dtype, Shape{total, d}));
  MP_ASSIGN_OR_RETURN(TensorView v,
                      ScratchBuffer(env.backend, &gather_v_, context.v.dtype, Shape{total, d}));
  const ConstTensorView index = SliceRows(index_.cview(), 0, total);
  MP_ASSIGN_OR_RETURN(ConstTensorView src_k, Reshape(context.k, Shape{n, d}));
  MP_ASSIGN_OR_RETURN(ConstTensorView src_v, Reshape(context.v, Shape{n, d}));
  MP_RETURN_IF_ERROR(env.backend.GatherRows({src_k, index, k}));
  MP_RETURN_IF_ERROR(env.backend.GatherRows({src_v, index, v}));
  return ConstKvRows{AsConst(k), AsConst(v)};
}

Status TokenSelection::Attend(AttentionEnv& env, ConstTensorView q, ConstKvRows rows,
                              int64_t position, TensorView o, TensorView lse) const {
  const ModelConfig& c = env.config;
  const int64_t kv_heads = c.num_key_value_heads, d = c.head_dim;
  const int64_t group = c.num_attention_heads / kv_heads;
  AttentionArgs a;
  a.q_offset = position;
  a.mask = AttentionMask::kNone;  // every context row precedes the token
  if (by_row_) {
    const int64_t m = total_rows() / kv_heads;
    a.q = q;
    MP_ASSIGN_OR_RETURN(a.k, Reshape(rows.k, Shape{m, kv_heads, d}));
    MP_ASSIGN_OR_RETURN(a.v, Reshape(rows.v, Shape{m, kv_heads, d}));
    a.o = o;
    a.lse = lse;
    return env.backend.Attention(a);
  }
  for (int64_t g = 0; g < kv_heads; ++g) {
    const int64_t first = head_offset_[static_cast<size_t>(g)];
    const int64_t m = head_offset_[static_cast<size_t>(g) + 1] - first;
    MP_ASSIGN_OR_RETURN(a.q, SubView(q, g * group * d, Shape{1, group, d}));
    MP_ASSIGN_OR_RETURN(a.o, SubView(o, g * group * d, Shape{1, group, d}));
    MP_ASSIGN_OR_RETURN(a.lse, SubView(lse, g * group, Shape{1, group}));
    if (m == 0) {
      MP_RETURN_IF_ERROR(env.backend.ClearState(a.o, a.lse));
      continue;
    }
    MP_ASSIGN_OR_RETURN(a.k, Reshape(SliceRows(rows.k, first, m), Shape{m, 1, d}));
    MP_ASSIGN_OR_RETURN(a.v, Reshape(SliceRows(rows.v, first, m), Shape{m, 1, d}));
    MP_RETURN_IF_ERROR(env.backend.Attention(a));
  }
  return OkStatus();
}

}  // namespace millipede
