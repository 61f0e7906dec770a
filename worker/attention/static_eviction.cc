#include "worker/attention/static_eviction.h"

#include <algorithm>

#include "worker/dist/global_top_k.h"

namespace millipede {
namespace {

std::vector<int64_t> Positions(std::span<const TokenRange> ranges) {
  std::vector<int64_t> out;
  for (const TokenRange& r : ranges)
    for (int64_t p = r.begin; p < r.end; ++p) out.push_back(p);
  return out;
}

Status Upload(Backend& b, const std::vector<int64_t>& host, TensorView dst) {
  if (host.empty()) return OkStatus();
  return b.CopyFromHost(ConstTensorView{host.data(), DType::kI64,
                                        Shape{static_cast<int64_t>(host.size())}},
                        dst);
}

}  // namespace

StatusOr<TensorView> StaticEvictionDecode::Buffer(AttentionEnv& env, BackendTensor* t,
                                                  DType dtype, const Shape& shape) {
  if (t->view().data == nullptr || t->view().dtype != dtype ||
      t->view().NumElements() < shape.NumElements()) {
    MP_ASSIGN_OR_RETURN(*t, env.backend.Allocate(dtype, Shape{std::max<int64_t>(
                                                            shape.NumElements(), 1)}));
  }
  return Reshape(SliceRows(t->view(), 0, shape.NumElements()), shape);
}

StatusOr<ConstTensorView> StaticEvictionDecode::ObservedQueries(AttentionEnv& env,
                                                                const PrefillInput& in,
                                                                int64_t obs_begin, int64_t obs) {
  const ModelConfig& c = env.config;
  const int64_t heads = c.num_attention_heads, width = heads * c.head_dim;
  MP_ASSIGN_OR_RETURN(TensorView q, Buffer(env, &obs_q_, DType::kF32, Shape{obs, width}));
  MP_ASSIGN_OR_RETURN(TensorView lse, Buffer(env, &acc_lse_, DType::kF32, Shape{obs, heads}));
  // Zeros where other ranks hold the rows (the state of no keys has o = 0).
  MP_ASSIGN_OR_RETURN(TensorView q3, Reshape(q, Shape{obs, heads, c.head_dim}));
  MP_RETURN_IF_ERROR(env.backend.ClearState(q3, lse));
  int64_t row = 0;
  for (const TokenRange& r : in.q_ranges) {
    const int64_t begin = std::max(r.begin, obs_begin);
    if (begin < r.end)
      MP_RETURN_IF_ERROR(env.backend.Convert(SliceRows(in.q, row + begin - r.begin, r.end - begin),
                                             SliceRows(q, begin - obs_begin, r.end - begin)));
    row += r.size();
  }
  // Each observed query is held by one rank: the sum over ranks is every rank's copy.
  if (env.comm.size() > 1) MP_RETURN_IF_ERROR(env.comm.AllReduce(q, ReduceOp::kSum));
  return Reshape(AsConst(q), Shape{obs, heads, c.head_dim});
}

StatusOr<ConstTensorView> StaticEvictionDecode::GlobalLse(AttentionEnv& env, ConstTensorView q,
                                                          int64_t obs_begin, ConstKvRows rows,
                                                          std::span<const TokenRange> ranges) {
  Backend& b = env.backend;
  const int64_t obs = q.dim(0), heads = q.dim(1);
  const Shape o_shape{obs, heads, env.config.head_dim}, lse_shape{obs, heads};
  MP_ASSIGN_OR_RETURN(TensorView acc_o, Buffer(env, &acc_o_, DType::kF32, o_shape));
  MP_ASSIGN_OR_RETURN(TensorView acc_lse, Buffer(env, &acc_lse_, DType::kF32, lse_shape));
  MP_ASSIGN_OR_RETURN(TensorView part_o, Buffer(env, &part_o_, DType::kF32, o_shape));
  MP_ASSIGN_OR_RETURN(TensorView part_lse, Buffer(env, &part_lse_, DType::kF32, lse_shape));
  MP_RETURN_IF_ERROR(b.ClearState(acc_o, acc_lse));
  int64_t row = 0;
  for (const TokenRange& r : ranges) {
    AttentionArgs a;
    a.q = q;
    a.k = SliceRows(rows.k, row, r.size());
    a.v = SliceRows(rows.v, row, r.size());
    a.q_offset = obs_begin;
    a.k_offset = r.begin;
    a.mask = AttentionMask::kCausal;
    a.o = part_o;
    a.lse = part_lse;
    MP_RETURN_IF_ERROR(b.Attention(a));
    MP_RETURN_IF_ERROR(b.MergeStateInPlace(acc_o, acc_lse, AsConst(part_o), AsConst(part_lse)));
    row += r.size();
  }
  const int n = env.comm.size();
  if (n > 1) {
    MP_ASSIGN_OR_RETURN(TensorView all_o,
                        Buffer(env, &all_o_, DType::kF32, Shape{n, obs, heads, o_shape.dims[2]}));
    MP_ASSIGN_OR_RETURN(TensorView all_lse,
                        Buffer(env, &all_lse_, DType::kF32, Shape{n, obs, heads}));
    MP_RETURN_IF_ERROR(env.comm.AllGather(AsConst(acc_o), all_o));
    MP_RETURN_IF_ERROR(env.comm.AllGather(AsConst(acc_lse), all_lse));
    MP_RETURN_IF_ERROR(b.MergeState({AsConst(all_o), AsConst(all_lse), acc_o, acc_lse}));
  }
  return AsConst(acc_lse);
}

StatusOr<std::vector<std::vector<int64_t>>> StaticEvictionDecode::Select(
    AttentionEnv& env, ConstTensorView scores, const std::vector<int64_t>& positions) {
  const int64_t groups = scores.dim(0), keep = params_.keep_tokens;
  MP_ASSIGN_OR_RETURN(TensorView index, Buffer(env, &top_index_, DType::kI32,
                                               Shape{groups, keep}));
  MP_ASSIGN_OR_RETURN(TensorView value, Buffer(env, &top_value_, DType::kF32,
                                               Shape{groups, keep}));
  MP_RETURN_IF_ERROR(env.backend.TopK({scores, keep, index, value}));
  std::vector<int32_t> host_index(static_cast<size_t>(groups * keep));
  std::vector<float> host_value(host_index.size());
  MP_RETURN_IF_ERROR(env.backend.CopyToHost(AsConst(index), {host_index.data(), DType::kI32,
                                                             index.shape}));
  MP_RETURN_IF_ERROR(env.backend.CopyToHost(AsConst(value), {host_value.data(), DType::kF32,
                                                             value.shape}));
  // This rank's best `keep` per KV head are its candidates; the cut is agreed over all ranks.
  std::vector<GlobalTopKCandidate> candidates;
  std::vector<int64_t> offsets = {0}, rows;
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t i = 0; i < keep; ++i) {
      const int32_t row = host_index[static_cast<size_t>(g * keep + i)];
      if (row < 0) break;  // fewer rows than keep
      candidates.push_back({host_value[static_cast<size_t>(g * keep + i)],
                            positions[static_cast<size_t>(row)]});
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
  MP_ASSIGN_OR_RETURN(TensorView dev_index, Buffer(env, &gather_index_, DType::kI64,
                                                   Shape{total}));
  MP_RETURN_IF_ERROR(Upload(env.backend, index, dev_index));
  MP_ASSIGN_OR_RETURN(TensorView k, Buffer(env, &heavy_k_, rows.k.dtype, Shape{total, d}));
  MP_ASSIGN_OR_RETURN(TensorView v, Buffer(env, &heavy_v_, rows.v.dtype, Shape{total, d}));
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
  const std::vector<int64_t> positions = Positions(ranges);
  MP_ASSERT(static_cast<int64_t>(positions.size()) == rows.k.dim(0),
            "block positions cover the rows");
  MP_ASSIGN_OR_RETURN(ConstTensorView q, ObservedQueries(env, in, obs_begin, obs));
  MP_ASSIGN_OR_RETURN(ConstTensorView lse, GlobalLse(env, q, obs_begin, rows, ranges));
  const int64_t n = rows.k.dim(0);
  std::vector<int64_t> q_positions(static_cast<size_t>(obs));
  for (int64_t t = 0; t < obs; ++t) q_positions[static_cast<size_t>(t)] = obs_begin + t;
  MP_ASSIGN_OR_RETURN(TensorView q_pos, Buffer(env, &q_pos_, DType::kI64, Shape{obs}));
  MP_ASSIGN_OR_RETURN(TensorView k_pos, Buffer(env, &k_pos_, DType::kI64, Shape{n}));
  MP_RETURN_IF_ERROR(Upload(env.backend, q_positions, q_pos));
  MP_RETURN_IF_ERROR(Upload(env.backend, positions, k_pos));
  MP_ASSIGN_OR_RETURN(TensorView scores, Buffer(env, &scores_, DType::kF32,
                                                Shape{c.num_key_value_heads, n}));
  MP_RETURN_IF_ERROR(env.backend.KeyScores({q, AsConst(q_pos), rows.k, AsConst(k_pos), lse,
                                            0.0f, scores}));
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
    const int64_t m = kept == nullptr ? 0
                                      : std::lower_bound(kept->begin(), kept->end(), recent_from) -
                                            kept->begin();
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
  for (const TokenRange& r : ranges) first += std::clamp<int64_t>(recent_from - r.begin, 0, r.size());
  const int64_t m = rows.k.dim(0) - first;
  if (m <= 0) return OkStatus();
  MP_ASSIGN_OR_RETURN(TensorView tmp_o, Buffer(env, &tmp_o_, DType::kF32, o.shape));
  MP_ASSIGN_OR_RETURN(TensorView tmp_lse, Buffer(env, &tmp_lse_, DType::kF32, lse.shape));
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

}  // namespace millipede
