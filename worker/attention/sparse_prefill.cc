#include "worker/attention/sparse_prefill.h"

#include <algorithm>
#include <numeric>

#include "worker/attention/scratch_buffer.h"
#include "worker/attention/sparse_prefill_scratch.h"

namespace millipede {

SparsePrefill::SparsePrefill(std::vector<int64_t> ring_heads, HeadWindows ring_windows,
                             std::vector<std::unique_ptr<SparsePatternIndex>> patterns,
                             int64_t dense_below, bool fp8)
    : dense_below_(dense_below),
      dense_(HeadWindows{}, 0, fp8),
      ring_heads_(std::move(ring_heads)),
      patterns_(std::move(patterns)) {
  for (const auto& p : patterns_) grid_ = std::gcd(grid_, p->grid());
  if (!ring_heads_.empty()) ring_ = std::make_unique<RingPrefill>(std::move(ring_windows), 0, fp8);
}

Status SparsePrefill::RunRingHeads(AttentionEnv& env, const PrefillInput& in, ConstKvRows mine) {
  Backend& b = env.backend;
  const ModelConfig& c = env.config;
  const int64_t heads = c.num_attention_heads, kv_heads = c.num_key_value_heads, d = c.head_dim;
  const int64_t group = heads / kv_heads, sub = static_cast<int64_t>(ring_heads_.size());
  const int64_t packed = sub * group, n = in.q.dim(0), rows = mine.k.dim(0);
  // Pack the ring heads' queries [n, packed, d] and keys and values [rows, sub, d].
  std::vector<int64_t> index;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t g : ring_heads_)
      for (int64_t j = 0; j < group; ++j) index.push_back(t * heads + g * group + j);
  MP_ASSIGN_OR_RETURN(TensorView q_index, UploadI64(b, &env.sparse.pack_index, index));
  MP_ASSIGN_OR_RETURN(TensorView q,
                      ScratchBuffer(b, &env.sparse.q_ring, DType::kF32, Shape{n * packed, d}));
  MP_ASSIGN_OR_RETURN(ConstTensorView q_src, Reshape(in.q, Shape{n * heads, d}));
  MP_RETURN_IF_ERROR(b.GatherRows({q_src, AsConst(q_index), q}));
  index.clear();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g : ring_heads_) index.push_back(r * kv_heads + g);
  MP_ASSIGN_OR_RETURN(TensorView kv_index, UploadI64(b, &env.sparse.pack_index, index));
  KvRows ring;
  MP_ASSIGN_OR_RETURN(ring.k,
                      ScratchBuffer(b, &env.sparse.k_ring, mine.k.dtype, Shape{rows * sub, d}));
  MP_ASSIGN_OR_RETURN(ring.v,
                      ScratchBuffer(b, &env.sparse.v_ring, mine.v.dtype, Shape{rows * sub, d}));
  MP_ASSIGN_OR_RETURN(ConstTensorView k_src, Reshape(mine.k, Shape{rows * kv_heads, d}));
  MP_ASSIGN_OR_RETURN(ConstTensorView v_src, Reshape(mine.v, Shape{rows * kv_heads, d}));
  MP_RETURN_IF_ERROR(b.GatherRows({k_src, AsConst(kv_index), ring.k}));
  MP_RETURN_IF_ERROR(b.GatherRows({v_src, AsConst(kv_index), ring.v}));
  // The ring's output, with one more row of the empty state (o = 0, lse = -inf) for the heads
  // it does not serve when unpacking.
  MP_ASSIGN_OR_RETURN(TensorView o,
                      ScratchBuffer(b, &env.sparse.o_ring, DType::kF32, Shape{n * packed + 1, d}));
  MP_ASSIGN_OR_RETURN(TensorView lse,
                      ScratchBuffer(b, &env.sparse.lse_ring, DType::kF32, Shape{n * packed + 1}));
  MP_ASSIGN_OR_RETURN(TensorView o_empty, Reshape(SliceRows(o, n * packed, 1), Shape{1, 1, d}));
  MP_ASSIGN_OR_RETURN(TensorView lse_empty, Reshape(SliceRows(lse, n * packed, 1), Shape{1, 1}));
  MP_RETURN_IF_ERROR(b.ClearState(o_empty, lse_empty));
  PrefillInput ring_in = in;
  MP_ASSIGN_OR_RETURN(ring_in.q, Reshape(AsConst(q), Shape{n, packed * d}));
  MP_ASSIGN_OR_RETURN(ring_in.o_acc, Reshape(SliceRows(o, 0, n * packed), Shape{n, packed * d}));
  MP_ASSIGN_OR_RETURN(ring_in.lse_acc, Reshape(SliceRows(lse, 0, n * packed), Shape{n, packed}));
  ConstKvRows packed_rows;
  MP_ASSIGN_OR_RETURN(packed_rows.k, Reshape(AsConst(ring.k), Shape{rows, sub, d}));
  MP_ASSIGN_OR_RETURN(packed_rows.v, Reshape(AsConst(ring.v), Shape{rows, sub, d}));
  MP_RETURN_IF_ERROR(ring_->RunOn(env, ring_in, packed_rows));
  // Unpack into every head's layout, in chunks, and merge into the output.
  std::vector<int64_t> slot(static_cast<size_t>(heads), -1);
  for (int64_t i = 0; i < sub; ++i)
    for (int64_t j = 0; j < group; ++j) slot[ring_heads_[i] * group + j] = i * group + j;
  const int64_t chunk = std::max<int64_t>(env.scratch.attention_rows, 1);
  for (int64_t s = 0; s < n; s += chunk) {
    const int64_t m = std::min(chunk, n - s);
    index.clear();
    for (int64_t t = s; t < s + m; ++t)
      for (int64_t h = 0; h < heads; ++h)
        index.push_back(slot[h] < 0 ? n * packed : t * packed + slot[h]);
    MP_ASSIGN_OR_RETURN(TensorView out_index, UploadI64(b, &env.sparse.pack_index, index));
    MP_ASSIGN_OR_RETURN(TensorView o_full,
                        ScratchBuffer(b, &env.sparse.o_full, DType::kF32, Shape{m * heads, d}));
    MP_ASSIGN_OR_RETURN(TensorView lse_full,
                        ScratchBuffer(b, &env.sparse.lse_full, DType::kF32, Shape{m * heads}));
    MP_RETURN_IF_ERROR(b.GatherRows({AsConst(o), AsConst(out_index), o_full}));
    MP_RETURN_IF_ERROR(b.GatherRows({AsConst(lse), AsConst(out_index), lse_full}));
    MP_ASSIGN_OR_RETURN(TensorView o_acc, Reshape(SliceRows(in.o_acc, s, m), Shape{m, heads, d}));
    MP_ASSIGN_OR_RETURN(ConstTensorView o_other, Reshape(AsConst(o_full), Shape{m, heads, d}));
    MP_ASSIGN_OR_RETURN(ConstTensorView lse_other, Reshape(AsConst(lse_full), Shape{m, heads}));
    MP_RETURN_IF_ERROR(b.MergeStateInPlace(o_acc, SliceRows(in.lse_acc, s, m), o_other, lse_other));
  }
  return OkStatus();
}

Status SparsePrefill::FetchNeeded(AttentionEnv& env, const PrefillInput& in,
                                  const std::vector<int64_t>& tiles, ConstKvRows mine,
                                  std::span<const TokenRange> mine_ranges) {
  std::vector<TokenRange> needs;
  for (const auto& p : patterns_) {
    MP_ASSIGN_OR_RETURN(const std::vector<TokenRange> more,
                        p->Needs(env, in, tiles, env.sparse.builder));
    needs.insert(needs.end(), more.begin(), more.end());
  }
  return env.sparse.fetch.Run(env, SubtractRanges(NormalizeRanges(std::move(needs)), mine_ranges),
                              in.rank_blocks, mine);
}

Status SparsePrefill::AttendChunk(AttentionEnv& env, const PrefillInput& in, int64_t q_row0,
                                  int64_t rows, const std::vector<int64_t>& tiles,
                                  const Buffer& buffer) {
  Backend& b = env.backend;
  const ModelConfig& c = env.config;
  const int64_t heads = c.num_attention_heads, d = c.head_dim;
  MP_ASSIGN_OR_RETURN(ConstTensorView dev_tiles, env.sparse.builder.UploadTiles(b, tiles));
  MP_ASSIGN_OR_RETURN(ConstTensorView runs, env.sparse.builder.UploadRuns(b, buffer.runs));
  MP_ASSIGN_OR_RETURN(ConstTensorView q,
                      Reshape(SliceRows(in.q, q_row0, rows), Shape{rows, heads, d}));
  MP_ASSIGN_OR_RETURN(TensorView o_part,
                      ScratchBuffer(b, &env.sparse.o_part, DType::kF32, Shape{rows, heads, d}));
  MP_ASSIGN_OR_RETURN(TensorView lse_part,
                      ScratchBuffer(b, &env.sparse.lse_part, DType::kF32, Shape{rows, heads}));
  MP_ASSIGN_OR_RETURN(TensorView o_acc,
                      Reshape(SliceRows(in.o_acc, q_row0, rows), Shape{rows, heads, d}));
  TensorView lse_acc = SliceRows(in.lse_acc, q_row0, rows);
  for (const auto& pattern : patterns_) {
    MP_ASSIGN_OR_RETURN(SparseIndexView index,
                        env.sparse.builder.Build(env, *pattern, dev_tiles, runs));
    if (in.pairs != nullptr && in.pairs->device.data != nullptr)
      MP_RETURN_IF_ERROR(
          b.SparseIndexPairs({dev_tiles, index, c.num_key_value_heads, in.pairs->device}));
    MP_RETURN_IF_ERROR(env.profiler.Mark(&env.stats.sparse_index_s));
    SparseAttentionArgs a;
    a.q = q;
    a.k = buffer.rows.k;
    a.v = buffer.rows.v;
    a.tiles = dev_tiles;
    a.index = index;
    a.o = o_part;
    a.lse = lse_part;
    MP_RETURN_IF_ERROR(b.SparseAttention(a));
    MP_RETURN_IF_ERROR(b.MergeStateInPlace(o_acc, lse_acc, AsConst(o_part), AsConst(lse_part)));
    MP_RETURN_IF_ERROR(env.profiler.Mark(&env.stats.attention_s));
  }
  return OkStatus();
}

Status SparsePrefill::Run(AttentionEnv& env, const PrefillInput& in) {
  if (in.length < dense_below_) return dense_.Run(env, in);
  Backend& b = env.backend;
  const int64_t n = in.q.dim(0);
  MP_RETURN_IF_ERROR(b.ClearState(SliceRows(in.o_acc, 0, n), SliceRows(in.lse_acc, 0, n)));
  MP_ASSIGN_OR_RETURN(const ConstKvRows mine, in.store->Rows(in.step_rows));
  const std::span<const TokenRange> mine_ranges =
      in.rank_blocks[static_cast<size_t>(env.comm.rank())];
  for (const auto& p : patterns_) MP_RETURN_IF_ERROR(p->Plan(env, in, mine, mine_ranges));
  MP_RETURN_IF_ERROR(env.profiler.Mark(&env.stats.sparse_select_s));
  const std::vector<int64_t> tiles = SparseQueryTiles(in.q_ranges, grid_);
  std::vector<Buffer> buffers;
  buffers.push_back({mine, SparseKeyRuns(mine_ranges)});
  if (env.comm.size() > 1) {
    MP_RETURN_IF_ERROR(FetchNeeded(env, in, tiles, mine, mine_ranges));
    if (env.sparse.fetch.fetched_rows() > 0)
      buffers.push_back({env.sparse.fetch.rows(), env.sparse.fetch.runs()});
  }
  MP_RETURN_IF_ERROR(env.profiler.Mark(&env.stats.comm_wait_s));
  if (ring_) {
    MP_RETURN_IF_ERROR(RunRingHeads(env, in, mine));
    MP_RETURN_IF_ERROR(env.profiler.Mark(&env.stats.attention_s));
  }
  // Tiles in chunks of at most attention_rows query rows (one index and one output per chunk).
  const int64_t max_rows = std::max<int64_t>(env.scratch.attention_rows, kSparseTileRows);
  for (size_t t0 = 0; t0 < tiles.size();) {
    const int64_t row0 = tiles[t0];
    size_t t1 = t0;
    while (t1 < tiles.size() && tiles[t1 + 1] - row0 <= max_rows) t1 += 3;
    std::vector<int64_t> chunk(tiles.begin() + static_cast<int64_t>(t0),
                               tiles.begin() + static_cast<int64_t>(t1));
    for (size_t i = 0; i < chunk.size(); i += 3) {
      chunk[i] -= row0;
      chunk[i + 1] -= row0;
    }
    const int64_t rows = tiles[t1 - 2] - row0;
    for (const Buffer& buffer : buffers)
      MP_RETURN_IF_ERROR(AttendChunk(env, in, row0, rows, chunk, buffer));
    t0 = t1;
  }
  return env.profiler.Mark(&env.stats.attention_s);
}

}  // namespace millipede
