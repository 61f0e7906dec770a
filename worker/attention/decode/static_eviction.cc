#include "worker/attention/decode/static_eviction.h"

#include <algorithm>

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

Status StaticEvictionDecode::GatherKept(AttentionEnv& env, ConstKvRows rows,
                                        const std::vector<std::vector<int64_t>>& kept) {
  const int64_t kv_heads = env.config.num_key_value_heads, d = env.config.head_dim;
  std::vector<int64_t> index;  // rows of K viewed as [rows * kv_heads, head_dim]
  head_offset_.assign(1, 0);
  for (int64_t g = 0; g < kv_heads; ++g) {
    for (int64_t row : kept[static_cast<size_t>(g)]) index.push_back(row * kv_heads + g);
    head_offset_.push_back(static_cast<int64_t>(index.size()));
  }
  const int64_t total = static_cast<int64_t>(index.size());
  if (total == 0) return OkStatus();
  MP_ASSIGN_OR_RETURN(TensorView dev_index, UploadI64(env.backend, &gather_index_, index));
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
  MP_ASSIGN_OR_RETURN(std::vector<std::vector<int64_t>> kept,
                      Select(env, AsConst(scores), positions));
  heavy_positions_.assign(kept.size(), {});
  for (size_t g = 0; g < kept.size(); ++g)
    for (int64_t row : kept[g]) heavy_positions_[g].push_back(positions[static_cast<size_t>(row)]);
  return GatherKept(env, rows, kept);
}

Status StaticEvictionDecode::Partial(AttentionEnv& env, const DecodeInput& in, TensorView o,
                                     TensorView lse) {
  const ModelConfig& c = env.config;
  Backend& b = env.backend;
  const int64_t kv_heads = c.num_key_value_heads, d = c.head_dim;
  const int64_t group = c.num_attention_heads / kv_heads;
  const int64_t recent_from = in.position - params_.recent_tokens + 1;
  // Kept keys older than the window, per KV head (newer ones are in the window below).
  for (int64_t g = 0; g < kv_heads; ++g) {
    MP_ASSIGN_OR_RETURN(ConstTensorView q_g, SubView(in.q, g * group * d, Shape{1, group, d}));
    MP_ASSIGN_OR_RETURN(TensorView o_g, SubView(o, g * group * d, Shape{1, group, d}));
    MP_ASSIGN_OR_RETURN(TensorView lse_g, SubView(lse, g * group, Shape{1, group}));
    const std::vector<int64_t>* kept =
        static_cast<size_t>(g) < heavy_positions_.size() ? &heavy_positions_[g] : nullptr;
    const int64_t m =
        kept == nullptr ? 0
                        : std::lower_bound(kept->begin(), kept->end(), recent_from) - kept->begin();
    if (m == 0) {
      MP_RETURN_IF_ERROR(b.ClearState(o_g, lse_g));
      continue;
    }
    const int64_t first = head_offset_[static_cast<size_t>(g)];
    AttentionArgs a;
    a.q = q_g;
    MP_ASSIGN_OR_RETURN(a.k, SubView(heavy_k_.cview(), first * d, Shape{m, 1, d}));
    MP_ASSIGN_OR_RETURN(a.v, SubView(heavy_v_.cview(), first * d, Shape{m, 1, d}));
    a.q_offset = in.position;
    a.mask = AttentionMask::kNone;
    a.o = o_g;
    a.lse = lse_g;
    MP_RETURN_IF_ERROR(b.Attention(a));
  }
  // The window: a suffix of this rank's rows (held, then the token's own).
  MP_ASSIGN_OR_RETURN(ConstKvRows rows, in.store->Rows(in.step_rows));
  std::vector<TokenRange> ranges = in.store->held_ranges();
  if (in.step_rows > 0) AppendRange(&ranges, {in.position, in.position + 1});
  int64_t first = 0;
  for (const TokenRange& r : ranges)
    first += std::clamp<int64_t>(recent_from - r.begin, 0, r.size());
  const int64_t m = rows.k.dim(0) - first;
  if (m <= 0) return OkStatus();
  MP_ASSIGN_OR_RETURN(TensorView tmp_o, ScratchBuffer(env.backend, &tmp_o_, DType::kF32, o.shape));
  MP_ASSIGN_OR_RETURN(TensorView tmp_lse,
                      ScratchBuffer(env.backend, &tmp_lse_, DType::kF32, lse.shape));
  AttentionArgs a;
  a.q = in.q;
  a.k = SliceRows(rows.k, first, m);
  a.v = SliceRows(rows.v, first, m);
  a.q_offset = in.position;
  a.mask = AttentionMask::kNone;
  a.o = tmp_o;
  a.lse = tmp_lse;
  MP_RETURN_IF_ERROR(b.Attention(a));
  return b.MergeStateInPlace(o, lse, AsConst(tmp_o), AsConst(tmp_lse));
}

StatusOr<DecodeRoleStrategy> BuildStaticEvictionDecode(const DecodeRoleContext& context) {
  return DecodeRoleStrategy{std::make_unique<StaticEvictionDecode>(context.policy.static_eviction),
                            nullptr};
}

}  // namespace millipede
