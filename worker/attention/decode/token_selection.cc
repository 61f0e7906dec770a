#include "worker/attention/decode/token_selection.h"

#include <algorithm>

#include "worker/attention/scratch_buffer.h"

namespace millipede {

void TokenSelection::SetHostTier(std::vector<int64_t> layers, BackendTensor arena, int64_t capacity,
                                 BackendTensor packed) {
  host_layers_ = std::move(layers);
  arena_ = std::move(arena);
  capacity_ = capacity;
  packed_ = std::move(packed);
  loads_.assign(host_layers_.size(), CopyEvent{});
}

KvRows TokenSelection::ArenaRows(const TensorView& arena, int64_t capacity, size_t i) {
  const int64_t block = static_cast<int64_t>(2 * i) * capacity;
  return KvRows{SliceRows(arena, block, capacity), SliceRows(arena, block + capacity, capacity)};
}

void TokenSelection::BeginDecode(int64_t context_end) {
  if (context_end_ < 0) context_end_ = context_end;
}

void TokenSelection::Reset() {
  context_end_ = position_ = -1;
  context_rows_ = slots_ = 0;
}

StatusOr<TensorView> TokenSelection::ChosenBuffer(AttentionEnv& env, int64_t slots) {
  MP_ASSERT(slots >= 0, "negative slots");
  position_ = -1;  // no valid choice until Choose
  slots_ = slots;
  return ScratchBuffer(env.backend, &chosen_, DType::kI32,
                       Shape{env.config.num_key_value_heads, slots});
}

Status TokenSelection::Choose(AttentionEnv& env, int64_t context_rows, int64_t position) {
  const int64_t kv_heads = env.config.num_key_value_heads;
  MP_ASSERT(position_ < 0 && chosen_.view().data != nullptr, "Choose without ChosenBuffer");
  MP_ASSIGN_OR_RETURN(
      ConstTensorView chosen,
      Reshape(SliceRows(chosen_.cview(), 0, kv_heads * slots_), Shape{kv_heads, slots_}));
  return Index(env, chosen, context_rows, position);
}

Status TokenSelection::ChooseFrom(AttentionEnv& env, ConstTensorView chosen, int64_t context_rows,
                                  int64_t position) {
  MP_ASSERT(chosen.rank() == 2 && chosen.dim(0) == env.config.num_key_value_heads,
            "a choice is [kv_heads, slots]");
  slots_ = chosen.dim(1);
  position_ = -1;
  return Index(env, chosen, context_rows, position);
}

Status TokenSelection::Index(AttentionEnv& env, ConstTensorView chosen, int64_t context_rows,
                             int64_t position) {
  const int64_t kv_heads = env.config.num_key_value_heads;
  context_rows_ = context_rows;
  // Block b of the index serves block b of the host arena (layer b / 2, K or V); block 0 is also
  // the index into any one store's context rows.
  const int64_t blocks = std::max<int64_t>(1, 2 * static_cast<int64_t>(host_layers_.size()));
  MP_ASSIGN_OR_RETURN(TensorView counts,
                      ScratchBuffer(env.backend, &counts_, DType::kI32, Shape{kv_heads}));
  MP_ASSIGN_OR_RETURN(TensorView index, ScratchBuffer(env.backend, &index_, DType::kI64,
                                                      Shape{blocks, slots_ * kv_heads}));
  if (slots_ > 0) {
    MP_RETURN_IF_ERROR(env.backend.SelectionIndex(
        {chosen, context_rows, capacity_ * kv_heads, index, counts}));
    if (!host_layers_.empty()) MP_RETURN_IF_ERROR(StartLoads(env));
  }
  position_ = position;
  return OkStatus();
}

Status TokenSelection::StartLoads(AttentionEnv& env) {
  const int64_t d = env.config.head_dim, kv_heads = env.config.num_key_value_heads;
  const int64_t m = slots_ * kv_heads, n = static_cast<int64_t>(host_layers_.size());
  MP_ASSERT(2 * n * m <= packed_.view().dim(0), 2 * n * m,
            " chosen rows exceed the packed load buffer of ", packed_.view().dim(0));
  MP_ASSIGN_OR_RETURN(ConstTensorView src,
                      Reshape(arena_.cview(), Shape{2 * n * capacity_ * kv_heads, d}));
  // index_ is flat: block b is [b * m, (b + 1) * m).
  const ConstTensorView index = SliceRows(index_.cview(), 0, 2 * n * m);
  for (int64_t i = 0; i < n; ++i) {
    // The first load waits for the compute queued so far (the index, and the previous step's
    // readers of the packed buffer); the queue runs in order, so the others follow it.
    const CopyOrder order = i == 0 ? CopyOrder::kAfterCompute : CopyOrder::kNow;
    MP_ASSIGN_OR_RETURN(loads_[static_cast<size_t>(i)],
                        env.backend.StartGatherRows({src, SliceRows(index, 2 * i * m, 2 * m),
                                                     SliceRows(packed_.view(), 2 * i * m, 2 * m)},
                                                    order));
  }
  env.stats.host_load_bytes += 2 * n * m * d * static_cast<int64_t>(DTypeSize(arena_.view().dtype));
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
  const int64_t i = it - host_layers_.begin();
  const CopyEvent load = loads_[static_cast<size_t>(i)];
  if (env.profiler.enabled()) {
    // Once the compute before it is done, how long the load still runs: the part not hidden.
    MP_RETURN_IF_ERROR(env.profiler.Mark(&env.stats.attention_s));
    MP_RETURN_IF_ERROR(env.backend.WaitCopy(load));
    MP_RETURN_IF_ERROR(env.profiler.Mark(&env.stats.load_wait_s));
  }
  MP_RETURN_IF_ERROR(env.backend.ComputeWaitFor(load));
  const ModelConfig& c = env.config;
  const int64_t m = slots_ * c.num_key_value_heads;
  const Shape shape{slots_, c.num_key_value_heads, c.head_dim};
  const ConstTensorView packed = packed_.cview();
  MP_ASSIGN_OR_RETURN(ConstTensorView k, Reshape(SliceRows(packed, 2 * i * m, m), shape));
  MP_ASSIGN_OR_RETURN(ConstTensorView v, Reshape(SliceRows(packed, (2 * i + 1) * m, m), shape));
  return ConstKvRows{k, v};
}

StatusOr<ConstKvRows> TokenSelection::Gather(AttentionEnv& env, ConstKvRows context) {
  const int64_t kv_heads = env.config.num_key_value_heads, d = env.config.head_dim;
  MP_ASSERT(context.k.dim(0) == context_rows_, "the layer's context rows (", context.k.dim(0),
            ") are not its filter layer's (", context_rows_, ")");
  const int64_t m = slots_ * kv_heads, n = context_rows_ * kv_heads;
  const Shape shape{slots_, kv_heads, d};
  MP_ASSIGN_OR_RETURN(TensorView k, ScratchBuffer(env.backend, &gather_k_, context.k.dtype, shape));
  MP_ASSIGN_OR_RETURN(TensorView v, ScratchBuffer(env.backend, &gather_v_, context.v.dtype, shape));
  const ConstTensorView index = SliceRows(index_.cview(), 0, m);  // block 0
  MP_ASSIGN_OR_RETURN(ConstTensorView src_k, Reshape(context.k, Shape{n, d}));
  MP_ASSIGN_OR_RETURN(ConstTensorView src_v, Reshape(context.v, Shape{n, d}));
  MP_ASSIGN_OR_RETURN(TensorView dst_k, Reshape(k, Shape{m, d}));
  MP_ASSIGN_OR_RETURN(TensorView dst_v, Reshape(v, Shape{m, d}));
  MP_RETURN_IF_ERROR(env.backend.GatherRows({src_k, index, dst_k}));
  MP_RETURN_IF_ERROR(env.backend.GatherRows({src_v, index, dst_v}));
  return ConstKvRows{AsConst(k), AsConst(v)};
}

StatusOr<ConstTensorView> TokenSelection::RowIndex(const AttentionEnv& env) const {
  const int64_t kv_heads = env.config.num_key_value_heads;
  return Reshape(SliceRows(index_.cview(), 0, slots_ * kv_heads), Shape{slots_, kv_heads});
}

Status TokenSelection::Attend(AttentionEnv& env, ConstTensorView q, ConstKvRows rows,
                              int64_t position, TensorView o, TensorView lse) const {
  AttentionArgs a;
  a.q = q;
  a.k = rows.k;
  a.v = rows.v;
  a.q_offset = position;
  a.mask = AttentionMask::kNone;  // every context row precedes the token
  a.o = o;
  a.lse = lse;
  a.kv_head_rows = counts(env);
  return env.backend.Attention(a);
}

}  // namespace millipede
