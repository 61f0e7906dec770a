#include "worker/attention/sparse_prefill.h"

#include <algorithm>

#include "worker/attention/scratch_buffer.h"

namespace millipede {
namespace {

// Host copy of a device I64 scalar at `index` of `t`.
StatusOr<int64_t> ReadI64(Backend& b, ConstTensorView t, int64_t index) {
  int64_t value = 0;
  MP_RETURN_IF_ERROR(b.CopyToHost(SliceRows(t, index, 1), {&value, DType::kI64, Shape{1}}));
  return value;
}

}  // namespace

std::vector<int64_t> SparseKeyRuns(std::span<const TokenRange> ranges) {
  std::vector<int64_t> runs;
  int64_t row = 0;
  for (const TokenRange& r : ranges) {
    runs.insert(runs.end(), {r.begin, r.end, row});
    row += r.size();
  }
  return runs;
}

std::vector<int64_t> SparseQueryTiles(std::span<const TokenRange> ranges, int64_t grid) {
  std::vector<int64_t> tiles;
  int64_t row = 0;
  for (const TokenRange& r : ranges) {
    for (int64_t p = r.begin; p < r.end;) {
      const int64_t next = std::min(r.end, (p / grid + 1) * grid);
      tiles.insert(tiles.end(), {row + p - r.begin, row + next - r.begin, p});
      p = next;
    }
    row += r.size();
  }
  return tiles;
}

std::vector<TokenRange> VerticalSlashNeeds(std::span<const TokenRange> q_ranges,
                                           std::span<const int64_t> columns,
                                           std::span<const int64_t> diagonals) {
  std::vector<TokenRange> out;
  if (q_ranges.empty()) return out;
  const int64_t last = q_ranges.back().end - 1;
  for (int64_t c : columns)
    if (c >= 0 && c <= last) out.push_back({c, c + 1});
  // A run's tiles see the bands of their whole query blocks (vertical_slash_index.h): from the
  // first block's start to the run's last query.
  for (const TokenRange& q : q_ranges) {
    const int64_t a = q.begin / kSparseTileRows * kSparseTileRows;
    const int64_t b = (q.end - 1) / kSparseTileRows * kSparseTileRows + kSparseTileRows - 1;
    for (int64_t d : diagonals)
      if (d >= 0 && b - d >= 0)
        out.push_back({std::max<int64_t>(0, a - d), std::min(b - d, q.end - 1) + 1});
  }
  return NormalizeRanges(std::move(out));
}

SparsePrefill::SparsePrefill(std::vector<HeadPrefillPolicy> heads, int64_t dense_below)
    : heads_(std::move(heads)), dense_below_(dense_below), dense_(HeadWindows{}, 0) {
  top_blocks_.assign(heads_.size(), 0);
  HeadWindows windows;
  for (size_t g = 0; g < heads_.size(); ++g) {
    const PrefillPattern p = heads_[g].pattern;
    if (p == PrefillPattern::kDense || p == PrefillPattern::kAShape) {
      ring_heads_.push_back(static_cast<int64_t>(g));
      windows.window.push_back(p == PrefillPattern::kAShape ? heads_[g].a_shape.window_tokens : 0);
      if (p == PrefillPattern::kAShape) windows.sink = heads_[g].a_shape.sink_tokens;
    }
    if (p == PrefillPattern::kVerticalSlash) has_vs_ = true;
    if (heads_[g].pattern != PrefillPattern::kBlockSparse) continue;
    has_bs_ = true;
    block_ = heads_[g].block_sparse.block;  // one block size per layer (checked when built)
    top_blocks_[g] = heads_[g].block_sparse.top_blocks;
  }
  if (has_bs_) grid_ = std::gcd(block_, kSparseTileRows);
  if (!ring_heads_.empty()) ring_ = std::make_unique<RingPrefill>(std::move(windows), 0);
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
  MP_ASSIGN_OR_RETURN(TensorView q_index, UploadI64(b, &pack_index_, index));
  MP_ASSIGN_OR_RETURN(TensorView q, ScratchBuffer(b, &q_ring_, DType::kF32, Shape{n * packed, d}));
  MP_ASSIGN_OR_RETURN(ConstTensorView q_src, Reshape(in.q, Shape{n * heads, d}));
  MP_RETURN_IF_ERROR(b.GatherRows({q_src, AsConst(q_index), q}));
  index.clear();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g : ring_heads_) index.push_back(r * kv_heads + g);
  MP_ASSIGN_OR_RETURN(TensorView kv_index, UploadI64(b, &pack_index_, index));
  KvRows ring;
  MP_ASSIGN_OR_RETURN(ring.k, ScratchBuffer(b, &k_ring_, mine.k.dtype, Shape{rows * sub, d}));
  MP_ASSIGN_OR_RETURN(ring.v, ScratchBuffer(b, &v_ring_, mine.v.dtype, Shape{rows * sub, d}));
  MP_ASSIGN_OR_RETURN(ConstTensorView k_src, Reshape(mine.k, Shape{rows * kv_heads, d}));
  MP_ASSIGN_OR_RETURN(ConstTensorView v_src, Reshape(mine.v, Shape{rows * kv_heads, d}));
  MP_RETURN_IF_ERROR(b.GatherRows({k_src, AsConst(kv_index), ring.k}));
  MP_RETURN_IF_ERROR(b.GatherRows({v_src, AsConst(kv_index), ring.v}));
  // The ring's output, with one more row of the empty state (o = 0, lse = -inf) for the heads
  // it does not serve when unpacking.
  MP_ASSIGN_OR_RETURN(TensorView o,
                      ScratchBuffer(b, &o_ring_, DType::kF32, Shape{n * packed + 1, d}));
  MP_ASSIGN_OR_RETURN(TensorView lse,
                      ScratchBuffer(b, &lse_ring_, DType::kF32, Shape{n * packed + 1}));
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
    MP_ASSIGN_OR_RETURN(TensorView out_index, UploadI64(b, &pack_index_, index));
    MP_ASSIGN_OR_RETURN(TensorView o_full,
                        ScratchBuffer(b, &o_full_, DType::kF32, Shape{m * heads, d}));
    MP_ASSIGN_OR_RETURN(TensorView lse_full,
                        ScratchBuffer(b, &lse_full_, DType::kF32, Shape{m * heads}));
    MP_RETURN_IF_ERROR(b.GatherRows({AsConst(o), AsConst(out_index), o_full}));
    MP_RETURN_IF_ERROR(b.GatherRows({AsConst(lse), AsConst(out_index), lse_full}));
    MP_ASSIGN_OR_RETURN(TensorView o_acc, Reshape(SliceRows(in.o_acc, s, m), Shape{m, heads, d}));
    MP_ASSIGN_OR_RETURN(ConstTensorView o_other, Reshape(AsConst(o_full), Shape{m, heads, d}));
    MP_ASSIGN_OR_RETURN(ConstTensorView lse_other, Reshape(AsConst(lse_full), Shape{m, heads}));
    MP_RETURN_IF_ERROR(b.MergeStateInPlace(o_acc, SliceRows(in.lse_acc, s, m), o_other, lse_other));
  }
  return OkStatus();
}

StatusOr<SparseIndexView> SparsePrefill::BuildIndex(AttentionEnv& env, bool vertical_slash,
                                                    ConstTensorView tiles, ConstTensorView runs) {
  Backend& b = env.backend;
  const ModelConfig& c = env.config;
  const int64_t kv_heads = c.num_key_value_heads, items = kv_heads * tiles.dim(0);
  MP_ASSIGN_OR_RETURN(TensorView range_offsets,
                      ScratchBuffer(b, &range_offsets_, DType::kI64, Shape{items + 1}));
  MP_ASSIGN_OR_RETURN(TensorView column_offsets,
                      ScratchBuffer(b, &column_offsets_, DType::kI64, Shape{items + 1}));
  SparseIndexOut out{range_offsets, {}, column_offsets, {}};
  // The fill pass repeats the count pass's arguments, and nothing writes their data in between:
  // the CUDA builders may reuse the count pass's selection.
  auto build = [&](bool fill) -> Status {
    if (vertical_slash) {
      VerticalSlashIndexArgs a;
      a.tiles = tiles;
      a.runs = runs;
      a.columns = {dev_columns_.view().data, DType::kI64, Shape{kv_heads, columns_width_}};
      a.diagonals = {dev_diagonals_.view().data, DType::kI64, Shape{kv_heads, diagonals_width_}};
      a.skip_absent = true;
      a.out = out;
      a.inputs_unchanged_since_count = fill;
      return b.VerticalSlashIndex(a);
    }
    BlockSparseIndexArgs a;
    a.tiles = tiles;
    a.runs = runs;
    a.q_sums = pooled_.q_sums;
    a.q_counts = pooled_.q_counts;
    a.k_sums = pooled_.k_sums;
    a.k_counts = pooled_.k_counts;
    a.block = block_;
    a.group = c.num_attention_heads / kv_heads;
    a.top_blocks = top_blocks_.data();
    a.skip_absent = true;
    a.out = out;
    a.inputs_unchanged_since_count = fill;
    return b.BlockSparseIndex(a);
  };
  MP_RETURN_IF_ERROR(build(false));  // the count pass
  MP_ASSIGN_OR_RETURN(const int64_t n_ranges, ReadI64(b, AsConst(range_offsets), items));
  MP_ASSIGN_OR_RETURN(const int64_t n_columns, ReadI64(b, AsConst(column_offsets), items));
  MP_ASSIGN_OR_RETURN(out.ranges, ScratchBuffer(b, &ranges_, DType::kI64, Shape{n_ranges, 3}));
  MP_ASSIGN_OR_RETURN(out.columns,
                      ScratchBuffer(b, &columns_out_, DType::kI64, Shape{n_columns, 2}));
  MP_RETURN_IF_ERROR(build(true));
  return SparseIndexView{AsConst(range_offsets), AsConst(out.ranges), AsConst(column_offsets),
                         AsConst(out.columns)};
}

StatusOr<std::vector<TokenRange>> SparsePrefill::Needs(AttentionEnv& env, const PrefillInput& in,
                                                       const std::vector<int64_t>& tiles) {
  std::vector<TokenRange> needs;
  for (size_t g = 0; g < heads_.size(); ++g) {
    if (heads_[g].pattern != PrefillPattern::kVerticalSlash) continue;
    const auto row = [&](const std::vector<int64_t>& v, int64_t width) {
      std::span<const int64_t> s(v.data() + static_cast<int64_t>(g) * width,
                                 static_cast<size_t>(width));
      return s.first(static_cast<size_t>(std::find(s.begin(), s.end(), -1) - s.begin()));
    };
    for (const TokenRange& r : VerticalSlashNeeds(in.q_ranges, row(columns_, columns_width_),
                                                  row(diagonals_, diagonals_width_)))
      needs.push_back(r);
  }
  if (has_bs_ && !tiles.empty()) {
    // The block selection, in positions: built over a layout where rows are positions.
    Backend& b = env.backend;
    MP_ASSIGN_OR_RETURN(TensorView dev_tiles, UploadI64(b, &dev_tiles_, tiles, 3));
    MP_ASSIGN_OR_RETURN(TensorView runs, UploadI64(b, &dev_runs_, {0, in.length, 0}, 3));
    MP_ASSIGN_OR_RETURN(SparseIndexView index,
                        BuildIndex(env, false, AsConst(dev_tiles), AsConst(runs)));
    std::vector<int64_t> host(static_cast<size_t>(index.ranges.NumElements()));
    if (!host.empty())
      MP_RETURN_IF_ERROR(
          b.CopyToHost(index.ranges, {host.data(), DType::kI64, index.ranges.shape}));
    for (size_t i = 0; i < host.size(); i += 3)
      needs.push_back({host[i + 2], host[i + 2] + host[i + 1] - host[i]});
  }
  return NormalizeRanges(std::move(needs));
}

Status SparsePrefill::AttendChunk(AttentionEnv& env, const PrefillInput& in, int64_t q_row0,
                                  int64_t rows, const std::vector<int64_t>& tiles,
                                  const Buffer& buffer) {
  Backend& b = env.backend;
  const ModelConfig& c = env.config;
  const int64_t heads = c.num_attention_heads, d = c.head_dim;
  MP_ASSIGN_OR_RETURN(TensorView dev_tiles, UploadI64(b, &dev_tiles_, tiles, 3));
  MP_ASSIGN_OR_RETURN(TensorView runs, UploadI64(b, &dev_runs_, buffer.runs, 3));
  MP_ASSIGN_OR_RETURN(ConstTensorView q,
                      Reshape(SliceRows(in.q, q_row0, rows), Shape{rows, heads, d}));
  MP_ASSIGN_OR_RETURN(TensorView o_part,
                      ScratchBuffer(b, &o_part_, DType::kF32, Shape{rows, heads, d}));
  MP_ASSIGN_OR_RETURN(TensorView lse_part,
                      ScratchBuffer(b, &lse_part_, DType::kF32, Shape{rows, heads}));
  MP_ASSIGN_OR_RETURN(TensorView o_acc,
                      Reshape(SliceRows(in.o_acc, q_row0, rows), Shape{rows, heads, d}));
  TensorView lse_acc = SliceRows(in.lse_acc, q_row0, rows);
  for (bool vertical_slash : {true, false}) {
    if (vertical_slash ? !has_vs_ : !has_bs_) continue;
    MP_ASSIGN_OR_RETURN(SparseIndexView index,
                        BuildIndex(env, vertical_slash, AsConst(dev_tiles), AsConst(runs)));
    if (in.pairs != nullptr && in.pairs->device.data != nullptr)
      MP_RETURN_IF_ERROR(b.SparseIndexPairs(
          {AsConst(dev_tiles), index, c.num_key_value_heads, in.pairs->device}));
    MP_RETURN_IF_ERROR(env.profiler.Mark(&env.stats.sparse_index_s));
    SparseAttentionArgs a;
    a.q = q;
    a.k = buffer.rows.k;
    a.v = buffer.rows.v;
    a.tiles = AsConst(dev_tiles);
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
  if (has_vs_) {
    MP_RETURN_IF_ERROR(SelectVerticalSlash(env, in, mine, mine_ranges));
    MP_RETURN_IF_ERROR(UploadI64(b, &dev_columns_, columns_).status());
    MP_RETURN_IF_ERROR(UploadI64(b, &dev_diagonals_, diagonals_).status());
  }
  if (has_bs_) MP_RETURN_IF_ERROR(PoolBlocks(env, in, mine, mine_ranges));
  MP_RETURN_IF_ERROR(env.profiler.Mark(&env.stats.sparse_select_s));
  const std::vector<int64_t> tiles = SparseQueryTiles(in.q_ranges, grid_);
  std::vector<Buffer> buffers;
  buffers.push_back({mine, SparseKeyRuns(mine_ranges)});
  if (env.comm.size() > 1) {
    MP_ASSIGN_OR_RETURN(const std::vector<TokenRange> needs, Needs(env, in, tiles));
    MP_RETURN_IF_ERROR(fetch_.Run(env, SubtractRanges(needs, mine_ranges), in.rank_blocks, mine));
    if (fetch_.fetched_rows() > 0) buffers.push_back({fetch_.rows(), fetch_.runs()});
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
