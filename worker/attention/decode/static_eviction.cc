#include "worker/attention/decode/static_eviction.h"

#include <algorithm>

#include "worker/attention/decode_parts.h"
#include "worker/attention/scratch_buffer.h"
#include "worker/dist/global_top_k.h"

namespace millipede {

StatusOr<std::vector<std::vector<int64_t>>> StaticEvictionDecode::Select(
    AttentionEnv& env, ConstTensorView scores, const std::vector<int64_t>& positions) {
  const int64_t groups = scores.dim(0), keep = params_.keep_tokens;
  MP_ASSIGN_OR_RETURN(const HostTopK top,
                      TopKToHost(env.backend, scores, keep, &top_index_, &top_value_));
  // This rank's best `keep` per KV head are its candidates; the cut is agreed over all ranks.
  std::vector<GlobalTopKCandidate> candidates;
  std::vector<int64_t> offsets = {0}, rows;
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t i = 0; i < keep; ++i) {
      const int32_t row = top.index[static_cast<size_t>(g * keep + i)];
      if (row < 0) break;  // fewer rows than keep
      candidates.push_back(
          {top.value[static_cast<size_t>(g * keep + i)], positions[static_cast<size_t>(row)]});
      rows.push_back(row);
    }
    offsets.push_back(static_cast<int64_t>(candidates.size()));
  }
  MP_ASSIGN_OR_RETURN(GlobalTopKResult result, GlobalTopK(env.comm, candidates, offsets, keep));
  std::vector<std::vector<int64_t>> kept(static_cast<size_t>(groups));
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t i = offsets[g]; i < offsets[g + 1]; ++i)
      if (result.keep[static_cast<size_t>(i)]) kept[g].push_back(rows[static_cast<size_t>(i)]);
    std::sort(kept[g].begin(), kept[g].end());
  }
  return kept;
}

Status StaticEvictionDecode::KeepRows(AttentionEnv& env, ConstKvRows rows,
                                      const std::vector<std::vector<int64_t>>& kept) {
  const ModelConfig& c = env.config;
  const int64_t kv_heads = c.num_key_value_heads, d = c.head_dim;
  heavy_k_ = {};
  heavy_v_ = {};
  if (pending_backend_ != nullptr) MP_RETURN_IF_ERROR(env.backend.WaitCopy(chosen_copy_));
  pending_backend_ = nullptr;
  slots_ = 0;
  for (const std::vector<int64_t>& head : kept)
    slots_ = std::max(slots_, static_cast<int64_t>(head.size()));
  counted_.clear();  // counts_ is stale
  if (slots_ == 0) return OkStatus();
  // Rows of K viewed as [rows * kv_heads, head_dim]; a head's slots past its kept rows repeat
  // its first (its count hides them).
  std::vector<int64_t> index(static_cast<size_t>(slots_ * kv_heads));
  for (int64_t g = 0; g < kv_heads; ++g) {
    const std::vector<int64_t>& head = kept[static_cast<size_t>(g)];
    for (int64_t j = 0; j < slots_; ++j) {
      const int64_t row =
          head.empty() ? 0 : head[static_cast<size_t>(std::min<int64_t>(j, head.size() - 1))];
      index[static_cast<size_t>(j * kv_heads + g)] = row * kv_heads + g;
    }
  }
  const int64_t total = slots_ * kv_heads;
  MP_ASSIGN_OR_RETURN(TensorView dev_index, UploadI64(env.backend, &gather_index_, index));
  // The batched kernel reads the kept rows in place through the index; only a backend whose
  // kernel reads no index gets copies.
  indexed_ = env.backend.DecodeTakesLengths(d, c.num_attention_heads / kv_heads, rows.k.dtype);
  if (indexed_) return OkStatus();
  MP_ASSIGN_OR_RETURN(TensorView k,
                      ScratchBuffer(env.backend, &heavy_k_, rows.k.dtype, Shape{total, d}));
  MP_ASSIGN_OR_RETURN(TensorView v,
                      ScratchBuffer(env.backend, &heavy_v_, rows.v.dtype, Shape{total, d}));
  const int64_t n = rows.k.dim(0) * kv_heads;
  MP_ASSIGN_OR_RETURN(ConstTensorView src_k, Reshape(rows.k, Shape{n, d}));
  MP_ASSIGN_OR_RETURN(ConstTensorView src_v, Reshape(rows.v, Shape{n, d}));
  MP_RETURN_IF_ERROR(env.backend.GatherRows({src_k, AsConst(dev_index), k}));
  return env.backend.GatherRows({src_v, AsConst(dev_index), v});
}

void StaticEvictionDecode::ReleasePrefillScratch() {
  // Back to the pool (stream-ordered, so the queued ops that read them finish first), not held
  // through the sequence's decode.
  scores_ = {};
  q_pos_ = {};
  k_pos_ = {};
  top_index_ = {};
  top_value_ = {};
}

StaticEvictionDecode::~StaticEvictionDecode() {
  // The chosen rows' copy to the host reads chosen_ and writes host_chosen_: not freed under it.
  if (pending_backend_ != nullptr) (void)pending_backend_->WaitCopy(chosen_copy_);
}

Status StaticEvictionDecode::ChooseOnDevice(AttentionEnv& env, ConstTensorView scores,
                                            std::vector<int64_t> positions) {
  Backend& b = env.backend;
  const int64_t kv_heads = env.config.num_key_value_heads, n = scores.dim(1);
  const int64_t k = std::min(params_.keep_tokens, n);
  heavy_k_ = {};
  heavy_v_ = {};
  indexed_ = true;
  slots_ = k;
  counted_.clear();  // counts_ is stale
  // An earlier prefill step's copy may still read chosen_ (scratch-pool memory, freed on the
  // compute queue when it grows) and write host_chosen_: it ends first. It was queued behind that
  // step's compute, which the host has since waited for, so this rarely waits.
  if (pending_backend_ != nullptr) MP_RETURN_IF_ERROR(b.WaitCopy(chosen_copy_));
  pending_backend_ = nullptr;
  heavy_positions_.assign(static_cast<size_t>(kv_heads), {});
  if (k == 0) return OkStatus();
  // Every head keeps exactly k rows (no score is NaN), in increasing row order.
  MP_ASSIGN_OR_RETURN(TensorView chosen,
                      ScratchBuffer(b, &chosen_, DType::kI32, Shape{kv_heads, k}));
  MP_ASSIGN_OR_RETURN(TensorView value,
                      ScratchBuffer(b, &top_value_, DType::kF32, Shape{kv_heads, k}));
  MP_RETURN_IF_ERROR(b.TopK({scores, k, chosen, value, TopKOrder::kColumn}));
  MP_ASSIGN_OR_RETURN(TensorView index,
                      ScratchBuffer(b, &gather_index_, DType::kI64, Shape{1, k * kv_heads}));
  MP_ASSIGN_OR_RETURN(TensorView counts,
                      ScratchBuffer(b, &chosen_counts_, DType::kI32, Shape{kv_heads}));
  MP_RETURN_IF_ERROR(b.SelectionIndex({AsConst(chosen), n, n * kv_heads, index, counts}));
  // The chosen rows come to the host behind the compute, for the counts of the decode steps.
  if (host_chosen_.view().NumElements() != k * kv_heads) {
    MP_ASSIGN_OR_RETURN(host_chosen_, b.AllocateHost(DType::kI32, Shape{kv_heads, k}));
  }
  MP_ASSIGN_OR_RETURN(chosen_copy_,
                      b.StartCopy(AsConst(chosen), host_chosen_.view(), CopyOrder::kAfterCompute));
  pending_backend_ = &b;
  chosen_positions_ = std::move(positions);
  return OkStatus();
}

Status StaticEvictionDecode::TakeChosen(AttentionEnv& env) {
  if (pending_backend_ == nullptr) return OkStatus();
  MP_RETURN_IF_ERROR(env.backend.WaitCopy(chosen_copy_));
  pending_backend_ = nullptr;
  const int64_t kv_heads = env.config.num_key_value_heads;
  const int32_t* chosen = host_chosen_.view().as<const int32_t>();
  heavy_positions_.assign(static_cast<size_t>(kv_heads), {});
  for (int64_t g = 0; g < kv_heads; ++g)
    for (int64_t i = 0; i < slots_; ++i) {
      const int32_t row = chosen[g * slots_ + i];
      MP_ASSERT(row >= 0 && row < static_cast<int64_t>(chosen_positions_.size()),
                "a chosen row outside the context");
      heavy_positions_[static_cast<size_t>(g)].push_back(
          chosen_positions_[static_cast<size_t>(row)]);
    }
  return OkStatus();
}

StatusOr<bool> StaticEvictionDecode::CountKept(AttentionEnv& env, int64_t recent_from) {
  MP_RETURN_IF_ERROR(TakeChosen(env));
  const int64_t kv_heads = env.config.num_key_value_heads;
  std::vector<int32_t> counts(static_cast<size_t>(kv_heads), 0);
  bool any = false;
  for (size_t g = 0; g < counts.size() && g < heavy_positions_.size(); ++g) {
    const std::vector<int64_t>& kept = heavy_positions_[g];
    counts[g] = static_cast<int32_t>(std::lower_bound(kept.begin(), kept.end(), recent_from) -
                                     kept.begin());
    any = any || counts[g] > 0;
  }
  if (counts != counted_) {
    MP_ASSIGN_OR_RETURN(TensorView dst,
                        ScratchBuffer(env.backend, &counts_, DType::kI32, Shape{kv_heads}));
    MP_RETURN_IF_ERROR(
        env.backend.CopyFromHost(ConstTensorView{counts.data(), DType::kI32, dst.shape}, dst));
    counted_ = std::move(counts);
  }
  return any;
}

Status StaticEvictionDecode::AfterPrefill(AttentionEnv& env, const PrefillInput& in) {
  const ModelConfig& c = env.config;
  const int64_t obs = std::min(params_.observed_queries, in.length);
  const int64_t obs_begin = in.length - obs;
  MP_ASSIGN_OR_RETURN(ConstKvRows rows, in.store->Rows(in.step_rows));
  const std::span<const TokenRange> ranges = in.rank_blocks[static_cast<size_t>(env.comm.rank())];
  const std::vector<int64_t> positions = RangePositions(ranges);
  MP_ASSERT(static_cast<int64_t>(positions.size()) == rows.k.dim(0),
            "block positions cover the rows");
  MP_ASSIGN_OR_RETURN(ConstTensorView q, observed_.Gather(env, in, obs_begin, obs));
  MP_ASSIGN_OR_RETURN(ConstTensorView lse, observed_.GlobalLse(env, q, obs_begin, rows, ranges));
  const int64_t n = rows.k.dim(0);
  std::vector<int64_t> q_positions(static_cast<size_t>(obs));
  for (int64_t t = 0; t < obs; ++t) q_positions[static_cast<size_t>(t)] = obs_begin + t;
  MP_ASSIGN_OR_RETURN(TensorView q_pos, UploadI64(env.backend, &q_pos_, q_positions));
  MP_ASSIGN_OR_RETURN(TensorView k_pos, UploadI64(env.backend, &k_pos_, positions));
  MP_ASSIGN_OR_RETURN(TensorView scores, ScratchBuffer(env.backend, &scores_, DType::kF32,
                                                       Shape{c.num_key_value_heads, n}));
  MP_RETURN_IF_ERROR(
      env.backend.KeyScores({q, AsConst(q_pos), rows.k, AsConst(k_pos), lse, 0.0f, scores, {}}));
  // One rank whose batched kernel reads the kept rows through their index: the choice stays on
  // the device (no host round trip per layer).
  if (env.comm.size() == 1 &&
      env.backend.DecodeTakesLengths(c.head_dim, c.num_attention_heads / c.num_key_value_heads,
                                     rows.k.dtype)) {
    MP_RETURN_IF_ERROR(ChooseOnDevice(env, AsConst(scores), positions));
    ReleasePrefillScratch();
    return OkStatus();
  }
  MP_ASSIGN_OR_RETURN(std::vector<std::vector<int64_t>> kept,
                      Select(env, AsConst(scores), positions));
  heavy_positions_.assign(kept.size(), {});
  for (size_t g = 0; g < kept.size(); ++g)
    for (int64_t row : kept[g]) heavy_positions_[g].push_back(positions[static_cast<size_t>(row)]);
  ReleasePrefillScratch();
  return KeepRows(env, rows, kept);
}

StatusOr<StaticEvictionDecode::Parts> StaticEvictionDecode::PartsOf(AttentionEnv& env,
                                                                    const DecodeInput& in) {
  const int64_t kv_heads = env.config.num_key_value_heads, d = env.config.head_dim;
  const int64_t recent_from = in.position - params_.recent_tokens + 1;
  Parts parts;
  // Kept keys older than the window, per KV head (newer ones are in the window below).
  MP_ASSIGN_OR_RETURN(const bool any_kept, CountKept(env, recent_from));
  if (any_kept && indexed_) {
    // Every row of the store, read through the index ([slots, kv_heads] flat rows; the buffer is
    // flat, ScratchBuffer's): kept rows are rows the store holds until the sequence ends.
    MP_ASSIGN_OR_RETURN(const ConstKvRows all, in.store->Rows(in.step_rows));
    MP_ASSIGN_OR_RETURN(
        const ConstTensorView index,
        Reshape(SliceRows(gather_index_.cview(), 0, slots_ * kv_heads), Shape{slots_, kv_heads}));
    parts.kept = {all, SliceRows(counts_.cview(), 0, kv_heads), index};
  } else if (any_kept) {
    // The buffers are flat (ScratchBuffer): the first slots x kv_heads x head_dim elements.
    const Shape shape{slots_, kv_heads, d};
    MP_ASSIGN_OR_RETURN(const ConstTensorView k,
                        Reshape(SliceRows(heavy_k_.cview(), 0, shape.NumElements()), shape));
    MP_ASSIGN_OR_RETURN(const ConstTensorView v,
                        Reshape(SliceRows(heavy_v_.cview(), 0, shape.NumElements()), shape));
    parts.kept = {{k, v}, SliceRows(counts_.cview(), 0, kv_heads)};
  }
  // The window: a suffix of this rank's rows (held, then the token's own).
  MP_ASSIGN_OR_RETURN(const ConstKvRows rows, in.store->Rows(in.step_rows));
  std::vector<TokenRange> ranges = in.store->held_ranges();
  if (in.step_rows > 0) AppendRange(&ranges, {in.position, in.position + 1});
  int64_t first = 0;
  for (const TokenRange& r : ranges)
    first += std::clamp<int64_t>(recent_from - r.begin, 0, r.size());
  const int64_t m = std::max<int64_t>(0, rows.k.dim(0) - first);
  parts.window = {SliceRows(rows.k, first, m), SliceRows(rows.v, first, m)};
  return parts;
}

Status StaticEvictionDecode::BatchParts(AttentionEnv& env, const DecodeInput& in,
                                        std::vector<DecodePart>* parts) {
  MP_ASSIGN_OR_RETURN(const Parts p, PartsOf(env, in));
  if (p.kept.rows.k.data != nullptr) parts->push_back(p.kept);
  if (p.window.k.dim(0) > 0) parts->push_back({p.window});
  return OkStatus();
}

Status StaticEvictionDecode::Partial(AttentionEnv& env, const DecodeInput& in, TensorView o,
                                     TensorView lse) {
  Backend& b = env.backend;
  if (indexed_) {
    parts_.clear();
    MP_RETURN_IF_ERROR(BatchParts(env, in, &parts_));
    return AttendParts(env, in.q, std::span<const std::vector<DecodePart>>(&parts_, 1), {}, o, lse,
                       &tmp_o_, &tmp_lse_);
  }
  MP_ASSIGN_OR_RETURN(const Parts p, PartsOf(env, in));
  const bool kept = p.kept.rows.k.data != nullptr, window = p.window.k.dim(0) > 0;
  if (!kept && !window) return b.ClearState(o, lse);
  auto attend = [&](const DecodePart& part, TensorView part_o, TensorView part_lse) {
    AttentionArgs a;
    a.q = in.q;
    a.k = part.rows.k;
    a.v = part.rows.v;
    a.q_offset = in.position;
    a.mask = AttentionMask::kNone;  // every kept and window row precedes (or is) the token
    a.o = part_o;
    a.lse = part_lse;
    a.kv_head_rows = part.head_rows;
    return b.Attention(a);
  };
  if (!kept) return attend({p.window}, o, lse);
  MP_RETURN_IF_ERROR(attend(p.kept, o, lse));
  if (!window) return OkStatus();
  MP_ASSIGN_OR_RETURN(TensorView tmp_o, ScratchBuffer(b, &tmp_o_, DType::kF32, o.shape));
  MP_ASSIGN_OR_RETURN(TensorView tmp_lse, ScratchBuffer(b, &tmp_lse_, DType::kF32, lse.shape));
  MP_RETURN_IF_ERROR(attend({p.window}, tmp_o, tmp_lse));
  return b.MergeStateInPlace(o, lse, AsConst(tmp_o), AsConst(tmp_lse));
}

StatusOr<DecodeRoleStrategy> BuildStaticEvictionDecode(const DecodeRoleContext& context) {
  return DecodeRoleStrategy{std::make_unique<StaticEvictionDecode>(context.policy.static_eviction),
                            nullptr};
}

}  // namespace millipede
