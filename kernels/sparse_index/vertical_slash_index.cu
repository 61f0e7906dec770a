#include <algorithm>
#include <cstdint>
#include <utility>

#include "common/cuda_check.h"
#include "kernels/sparse_index/sparse_index.cuh"
#include "kernels/sparse_index/vertical_slash_index_cuda.h"

namespace millipede {
namespace {

using namespace sparse_index_cuda;  // NOLINT(build/namespaces): the builders' shared internals

constexpr int kThreads = 256;

struct Params {
  const int64_t* tiles;
  int64_t n_tiles;
  const int64_t* runs;
  int64_t n_runs;
  const int64_t* columns;  // [num_kv_heads, n_vertical]
  int64_t n_vertical;
  const int64_t* diagonals;  // [num_kv_heads, n_slash]
  int64_t n_slash;
  const int64_t* n_valid;  // [2, num_kv_heads]: selected columns, then selected diagonals
  // The selected diagonals of each head in groups whose neighbours lie at most a query block's
  // length apart (their bands merge in every block): [num_kv_heads] counts, and
  // [num_kv_heads, n_slash] each group's smallest and largest diagonal, ascending.
  const int64_t* n_groups;
  const int64_t* group_lo;
  const int64_t* group_hi;
  int64_t num_kv_heads;
  bool skip_absent;
  int64_t* range_offsets;
  int64_t* column_offsets;
  int64_t* ranges;  // fill pass: [ranges_rows, 3]
  int64_t ranges_rows;
  int64_t* out_columns;  // fill pass: [columns_rows, 2]
  int64_t columns_rows;
  ErrorWord* error;
};

// One block per KV head: reports a selection that is negative (other than -1), out of order or
// after a -1, and counts the head's selections (which then form a prefix of its row).
__global__ void CheckSelectionsKernel(Params p, int64_t* n_valid) {
  __shared__ unsigned long long count[2];
  const int64_t g = blockIdx.x;
  if (threadIdx.x < 2) count[threadIdx.x] = 0;
  __syncthreads();
  for (int which = 0; which < 2; ++which) {
    const int64_t n = which == 0 ? p.n_vertical : p.n_slash;
    const int64_t* row = (which == 0 ? p.columns : p.diagonals) + g * n;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const int64_t v = row[i];
      if (v == -1) continue;
      atomicAdd(&count[which], 1ull);
      if (v < 0 || (i > 0 && (row[i - 1] == -1 || row[i - 1] >= v)))
        Report(p.error, kBadSelection, g, which, i, v);
    }
  }
  __syncthreads();
  if (threadIdx.x < 2)
    n_valid[threadIdx.x * p.num_kv_heads + g] = static_cast<int64_t>(count[threadIdx.x]);
}

// One warp per KV head: the head's selected diagonals (a sorted prefix of n_valid entries) in
// groups of neighbours at most kSparseTileRows apart, ascending.
__global__ void GroupDiagonalsKernel(Params p, int64_t* n_groups, int64_t* group_lo,
                                     int64_t* group_hi) {
  const int lane = threadIdx.x & 31;
  const int64_t g = blockIdx.x;
  const int64_t* diag = p.diagonals + g * p.n_slash;
  const int64_t n = min(p.n_valid[p.num_kv_heads + g], p.n_slash);
  int64_t starts = 0, ends = 0;
  for (int64_t lo = 0; lo < n; lo += 32) {
    const int64_t idx = lo + lane;
    const bool valid = idx < n;
    const int64_t d = valid ? diag[idx] : 0;
    const bool first = valid && (idx == 0 || d - diag[idx - 1] > kSparseTileRows);
    const bool last = valid && (idx + 1 == n || diag[idx + 1] - d > kSparseTileRows);
    const unsigned first_mask = __ballot_sync(kFullMask, first);
    const unsigned last_mask = __ballot_sync(kFullMask, last);
    const unsigned below = (1u << lane) - 1;
    if (first) group_lo[g * p.n_slash + starts + __popc(first_mask & below)] = d;
    if (last) group_hi[g * p.n_slash + ends + __popc(last_mask & below)] = d;
    starts += __popc(first_mask);
    ends += __popc(last_mask);
  }
  if (lane == 0) n_groups[g] = starts;
}

// The merged bands of item (g, t), whose tile ends at position e inside the query block [a, b]:
// their pieces are counted (and written from the item's range offset in the fill pass). Bands
// are [max(0, a - d), min(b - d, e)] for the diagonals d <= b; those of one group of diagonals
// (GroupDiagonalsKernel: neighbours at most the block's length apart) merge into one range from
// a - (its largest d <= b) to min(b - its smallest d, e), and ranges of different groups neither
// touch nor overlap. Lane l takes the l-th group from the top, so lanes run in ascending
// position; the work is per group, not per diagonal.
template <bool kFill>
__device__ int64_t ItemRanges(const Params& p, int64_t g, int64_t t, int64_t a, int64_t b,
                              int64_t e) {
  const int lane = threadIdx.x & 31;
  const int64_t* diag = p.diagonals + g * p.n_slash;
  const int64_t* lo_d = p.group_lo + g * p.n_slash;
  const int64_t* hi_d = p.group_hi + g * p.n_slash;
  const int64_t reach = UpperBound(diag, p.n_valid[p.num_kv_heads + g], b);  // bands with d <= b
  if (reach == 0) return 0;
  const int64_t top = diag[reach - 1];
  const int64_t groups = UpperBound(lo_d, p.n_groups[g], b);  // the groups holding them
  const int64_t base = kFill ? p.range_offsets[g * p.n_tiles + t] : 0;
  int64_t count = 0;
  for (int64_t hi = groups - 1; hi >= 0; hi -= 32) {
    const int64_t idx = hi - lane;
    const bool valid = idx >= 0;
    int64_t start = 0, end = 0, pieces = 0, absent = 0;
    if (valid) {
      start = max(int64_t{0}, a - (idx == groups - 1 ? top : hi_d[idx]));
      end = min(b - lo_d[idx], e) + 1;
      if (!PlaceRange(p.runs, p.n_runs, start, end, p.skip_absent, &absent,
                      [&](int64_t, int64_t, int64_t) { ++pieces; }))
        Report(p.error, kAbsentPosition, g, t, absent);
    }
    const int64_t inclusive = WarpInclusiveSum(pieces);
    if (kFill && valid) {
      int64_t o = base + count + inclusive - pieces;
      PlaceRange(p.runs, p.n_runs, start, end, p.skip_absent, &absent,
                 [&](int64_t row_begin, int64_t row_end, int64_t pos) {
                   if (o < p.ranges_rows) {
                     p.ranges[3 * o] = row_begin;
                     p.ranges[3 * o + 1] = row_end;
                     p.ranges[3 * o + 2] = pos;
                   }
                   ++o;
                 });
    }
    count += __shfl_sync(kFullMask, inclusive, 31);
  }
  return count;
}

// The selected columns c <= e of item (g, t) outside every band: such a c is inside a band iff
// some selected diagonal lies in [a - c, b - c].
template <bool kFill>
__device__ int64_t ItemColumns(const Params& p, int64_t g, int64_t t, int64_t a, int64_t b,
                               int64_t e) {
  const int lane = threadIdx.x & 31;
  const int64_t* cols = p.columns + g * p.n_vertical;
  const int64_t* diag = p.diagonals + g * p.n_slash;
  const int64_t n_diag = p.n_valid[p.num_kv_heads + g];
  const int64_t reach = UpperBound(cols, p.n_valid[g], e);
  const int64_t base = kFill ? p.column_offsets[g * p.n_tiles + t] : 0;
  int64_t count = 0;
  for (int64_t lo = 0; lo < reach; lo += 32) {
    const int64_t idx = lo + lane;
    const int64_t c = idx < reach ? cols[idx] : 0;
    int64_t row = -1;
    if (idx < reach) {
      const int64_t j = LowerBound(diag, n_diag, a - c);
      if (j == n_diag || diag[j] > b - c) {
        row = RowOf(p.runs, p.n_runs, c);
        if (row < 0 && !p.skip_absent) Report(p.error, kAbsentPosition, g, t, c);
      }
    }
    const unsigned keep = __ballot_sync(kFullMask, row >= 0);
    if (kFill && row >= 0) {
      const int64_t o = base + count + __popc(keep & ((1u << lane) - 1));
      if (o < p.columns_rows) {
        p.out_columns[2 * o] = row;
        p.out_columns[2 * o + 1] = c;
      }
    }
    count += __popc(keep);
  }
  return count;
}

// One warp per item (KV head g, tile t), items in CSR order. The count pass writes each item's
// counts at offsets[item + 1]; the fill pass writes from offsets[item].
template <bool kFill>
__global__ void __launch_bounds__(kThreads) VerticalSlashIndexKernel(Params p) {
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (kThreads / 32);
  const int64_t items = p.num_kv_heads * p.n_tiles;
  for (int64_t item = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / 32;
       item < items; item += warps) {
    const int64_t g = item / p.n_tiles, t = item - g * p.n_tiles;
    const int64_t rows = p.tiles[3 * t + 1] - p.tiles[3 * t], pos = p.tiles[3 * t + 2];
    int64_t n_ranges = 0, n_columns = 0;
    if (rows >= 1 && rows <= kSparseTileRows && pos >= 0) {  // else reported by the checks
      // The query block holding the tile: its bands, whatever part of it the tile holds.
      const int64_t a = pos / kSparseTileRows * kSparseTileRows, b = a + kSparseTileRows - 1;
      const int64_t e = pos + rows - 1;
      n_ranges = ItemRanges<kFill>(p, g, t, a, b, e);
      n_columns = ItemColumns<kFill>(p, g, t, a, b, e);
    }
    if (!kFill && (threadIdx.x & 31) == 0) {
      p.range_offsets[item + 1] = n_ranges;
      p.column_offsets[item + 1] = n_columns;
    }
  }
}

// The count pass's arguments as its fill pass must repeat them (vertical_slash_index.h), fill
// buffers aside.
CallFingerprint Fingerprint(const VerticalSlashIndexArgs& args) {
  CallFingerprint f;
  f.Add(int64_t{2}).Add(args.tiles).Add(args.runs).Add(args.columns).Add(args.diagonals);
  f.Add(args.skip_absent).Add(args.out.range_offsets).Add(args.out.column_offsets);
  return f;
}

// The selection checks and counts into ws.heads, then every item's counts and the offsets.
Status CountItems(const Params& p, int64_t items, SparseIndexCudaWorkspace::Impl& ws,
                  cudaStream_t stream) {
  const int64_t heads = p.num_kv_heads;
  if (heads > 0) {
    MP_REQUIRE(heads <= (int64_t{1} << 31) - 1, "vertical_slash_index: too many KV heads");
    int64_t* per_head = static_cast<int64_t*>(ws.heads.data());
    CheckSelectionsKernel<<<static_cast<unsigned>(heads), kThreads, 0, stream>>>(p, per_head);
    MP_CUDA_CHECK_LAUNCH();
    GroupDiagonalsKernel<<<static_cast<unsigned>(heads), 32, 0, stream>>>(
        p, per_head + 2 * heads, per_head + 3 * heads, per_head + 3 * heads + heads * p.n_slash);
    MP_CUDA_CHECK_LAUNCH();
  }
  if (items > 0) {
    VerticalSlashIndexKernel<false><<<WarpBlocks(items), kThreads, 0, stream>>>(p);
    MP_CUDA_CHECK_LAUNCH();
  }
  MP_RETURN_IF_ERROR(ScanOffsets(ws, p.range_offsets, items, stream));
  return ScanOffsets(ws, p.column_offsets, items, stream);
}

}  // namespace

Status VerticalSlashIndexCuda(const VerticalSlashIndexArgs& args,
                              SparseIndexCudaWorkspace& workspace, cudaStream_t stream) {
  MP_RETURN_IF_ERROR(VerticalSlashIndexCheckArgs(args));
  SparseIndexCudaWorkspace::Impl& ws = workspace.impl();
  const int64_t heads = args.columns.dim(0), n_tiles = args.tiles.dim(0);
  const int64_t items = heads * n_tiles;
  CallFingerprint call = Fingerprint(args);
  // Reuse: the count pass's selection counts (ws.heads) and offsets are still in place.
  const bool reuse = ReusesCountPass(ws, call, args.out, args.inputs_unchanged_since_count);
  MP_RETURN_IF_ERROR(BeginChecks(ws, args.tiles, args.runs, stream));
  // ws.heads: [2, heads] selection counts, [heads] group counts, [heads, n_slash] the groups'
  // smallest and then largest diagonals.
  const int64_t n_slash = args.diagonals.dim(1);
  MP_RETURN_IF_ERROR(ws.heads.Reserve(
      static_cast<size_t>(std::max<int64_t>(3 * heads + 2 * heads * n_slash, 1)) * 8, stream));
  const int64_t* per_head = static_cast<const int64_t*>(ws.heads.data());
  const bool fill = !args.out.CountPass();
  Params p{args.tiles.as<const int64_t>(),
           n_tiles,
           args.runs.as<const int64_t>(),
           args.runs.dim(0),
           args.columns.as<const int64_t>(),
           args.columns.dim(1),
           args.diagonals.as<const int64_t>(),
           args.diagonals.dim(1),
           per_head,
           per_head + 2 * heads,
           per_head + 3 * heads,
           per_head + 3 * heads + heads * n_slash,
           heads,
           args.skip_absent,
           args.out.range_offsets.as<int64_t>(),
           args.out.column_offsets.as<int64_t>(),
           fill ? args.out.ranges.as<int64_t>() : nullptr,
           fill ? args.out.ranges.dim(0) : 0,
           fill ? args.out.columns.as<int64_t>() : nullptr,
           fill ? args.out.columns.dim(0) : 0,
           ws.error};
  if (!reuse) MP_RETURN_IF_ERROR(CountItems(p, items, ws, stream));
  if (fill) {
    MP_RETURN_IF_ERROR(CheckFillSizes(ws, args.out, items, stream));
    if (items > 0) {
      VerticalSlashIndexKernel<true><<<WarpBlocks(items), kThreads, 0, stream>>>(p);
      MP_CUDA_CHECK_LAUNCH();
    }
  }
  return FinishBuild(ws, "vertical_slash_index", args.out, std::move(call), stream);
}

}  // namespace millipede
