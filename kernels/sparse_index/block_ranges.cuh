// Internals shared by the builders whose index is runs of kept key blocks (block_sparse_index.cu,
// block_mask_index.cu): the tile checks and the warp that turns an item's kept-block bitmap into
// ranges. Include only from .cu files.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "common/cuda_check.h"
#include "kernels/sparse_index/sparse_index.cuh"

namespace millipede::block_ranges_cuda {

using namespace sparse_index_cuda;  // NOLINT(build/namespaces): the builders' shared internals

inline constexpr int kThreads = 256;

// Per tile (well-formed ones; BeginChecks reports the others): within one block of positions,
// in the query blocks [qb_lo, qb_hi), and (q_counts not null) a query block with queries.
static __global__ void CheckTilesKernel(const int64_t* tiles, int64_t n_tiles, int64_t block,
                                        int64_t qb_lo, int64_t qb_hi, const float* q_counts,
                                        ErrorWord* error) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = blockIdx.x * blockDim.x + threadIdx.x; t < n_tiles; t += stride) {
    const int64_t rows = tiles[3 * t + 1] - tiles[3 * t], pos = tiles[3 * t + 2];
    if (rows < 1 || pos < 0) continue;
    const int64_t qb = pos / block;
    if ((pos + rows - 1) / block != qb) {
      Report(error, kTileCrossesBlock, t, pos, block);
    } else if (qb < qb_lo || qb >= qb_hi) {
      Report(error, kTileBeyondBlocks, t, qb, qb_hi);
    } else if (q_counts != nullptr && !(q_counts[qb] > 0.0f)) {
      Report(error, kEmptyQueryBlock, t, qb);
    }
  }
}

struct RangeParams {
  const int64_t* tiles;
  int64_t n_tiles;
  const int64_t* runs;
  int64_t n_runs;
  const int64_t* top;  // [heads], device: items of heads with top[g] <= 0 are empty
  int64_t heads, block, words;
  // The query blocks with bitmaps: [qb_lo, qb_hi).
  int64_t qb_lo, qb_hi;
  // Bitmaps, `words` each: per item [heads * n_tiles] (by_block false), or per KV head and query
  // block [heads, qb_hi - qb_lo] (by_block true).
  const uint32_t* kept;
  bool by_block;
  bool skip_absent;
  int64_t* range_offsets;
  int64_t* column_offsets;
  int64_t* ranges;  // fill pass: [ranges_rows, 3]
  int64_t ranges_rows;
  ErrorWord* error;
};

// One warp per item in CSR order: counts at offsets[item + 1] (count pass; no columns), or
// ranges written from offsets[item] (fill pass). Each run of kept blocks [kb0, kb1] <= the
// tile's query block covers positions [kb0 * block, min((kb1 + 1) * block, b + 1)), b the tile's
// last position.
// The last block of the run of kept blocks that starts at kb.
__device__ inline int64_t RunLast(const uint32_t* bits, int64_t n_words, int64_t kb) {
  int64_t w = kb >> 5;
  uint32_t zeros = ~bits[w] & (~0u << (kb & 31));
  while (zeros == 0) {
    if (++w == n_words) return n_words * 32 - 1;
    zeros = ~bits[w];
  }
  return w * 32 + __ffs(zeros) - 2;
}

// Item (g, t)'s ranges, tile positions ending at b: lane l takes bitmap word w0 + l, so runs come
// out in position order; a run starts at a set bit (at most qb) whose lower neighbour is clear.
template <bool kFill>
__device__ int64_t ItemRanges(const RangeParams& p, const uint32_t* bits, int64_t item, int64_t g,
                              int64_t t, int64_t qb, int64_t b) {
  const int lane = threadIdx.x & 31;
  const int64_t n_words = qb / 32 + 1;
  const uint32_t last_mask = (qb & 31) == 31 ? ~0u : (2u << (qb & 31)) - 1u;
  const int64_t base = kFill ? p.range_offsets[item] : 0;
  int64_t count = 0;
  for (int64_t w0 = 0; w0 < n_words; w0 += 32) {
    const int64_t w = w0 + lane;
    const uint32_t word = w < n_words ? bits[w] & (w == n_words - 1 ? last_mask : ~0u) : 0;
    uint32_t below = __shfl_up_sync(kFullMask, word, 1);
    if (lane == 0) below = w0 > 0 ? bits[w0 - 1] : 0;
    const uint32_t starts = word & ~((word << 1) | (below >> 31));
    auto for_each_run = [&](auto&& place) {
      for (uint32_t s = starts; s != 0; s &= s - 1) {
        const int64_t kb0 = w * 32 + __ffs(s) - 1, kb1 = RunLast(bits, n_words, kb0);
        place(kb0 * p.block, min((kb1 + 1) * p.block, b + 1));
      }
    };
    int64_t pieces = 0, absent = 0;
    for_each_run([&](int64_t begin, int64_t end) {
      if (!PlaceRange(p.runs, p.n_runs, begin, end, p.skip_absent, &absent,
                      [&](int64_t, int64_t, int64_t) { ++pieces; }))
        Report(p.error, kAbsentPosition, g, t, absent);
    });
    const int64_t inclusive = WarpInclusiveSum(pieces);
    if (kFill) {
      int64_t o = base + count + inclusive - pieces;
      for_each_run([&](int64_t begin, int64_t end) {
        PlaceRange(p.runs, p.n_runs, begin, end, p.skip_absent, &absent,
                   [&](int64_t row_begin, int64_t row_end, int64_t pos) {
                     if (o < p.ranges_rows) {
                       p.ranges[3 * o] = row_begin;
                       p.ranges[3 * o + 1] = row_end;
                       p.ranges[3 * o + 2] = pos;
                     }
                     ++o;
                   });
      });
    }
    count += __shfl_sync(kFullMask, inclusive, 31);
  }
  return count;
}

template <bool kFill>
__global__ void __launch_bounds__(kThreads) RangesKernel(RangeParams p);

// A builder's passes over `p` (items = p.heads * p.n_tiles): unless it reuses its count pass
// (`reuse`), the counts and their scan into the offsets; then, outside the count pass, the fill
// after the size check; then FinishBuild as `what` with the call's fingerprint.
inline Status RunRangePasses(SparseIndexCudaWorkspace::Impl& ws, const RangeParams& p,
                             const SparseIndexOut& out, bool reuse, const char* what,
                             CallFingerprint call, cudaStream_t stream) {
  const int64_t items = p.heads * p.n_tiles;
  if (!reuse) {
    if (items > 0) {
      RangesKernel<false><<<WarpBlocks(items), kThreads, 0, stream>>>(p);
      MP_CUDA_CHECK_LAUNCH();
    }
    MP_RETURN_IF_ERROR(ScanOffsets(ws, p.range_offsets, items, stream));
    MP_RETURN_IF_ERROR(ScanOffsets(ws, p.column_offsets, items, stream));
  }
  if (!out.CountPass()) {
    MP_RETURN_IF_ERROR(CheckFillSizes(ws, out, items, stream));
    if (items > 0) {
      RangesKernel<true><<<WarpBlocks(items), kThreads, 0, stream>>>(p);
      MP_CUDA_CHECK_LAUNCH();
    }
  }
  return FinishBuild(ws, what, out, std::move(call), stream);
}

template <bool kFill>
__global__ void __launch_bounds__(kThreads) RangesKernel(RangeParams p) {
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (kThreads / 32);
  for (int64_t item = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / 32;
       item < p.heads * p.n_tiles; item += warps) {
    const int64_t g = item / p.n_tiles, t = item - g * p.n_tiles;
    const int64_t rows = p.tiles[3 * t + 1] - p.tiles[3 * t], pos = p.tiles[3 * t + 2];
    const int64_t qb = pos >= 0 ? pos / p.block : -1;
    int64_t count = 0;
    if (p.top[g] > 0 && rows >= 1 && rows <= kSparseTileRows && qb >= p.qb_lo && qb < p.qb_hi &&
        (pos + rows - 1) / p.block == qb) {  // else empty, or reported by checks
      const uint32_t* bits =
          p.kept + (p.by_block ? g * (p.qb_hi - p.qb_lo) + qb - p.qb_lo : item) * p.words;
      count = ItemRanges<kFill>(p, bits, item, g, t, qb, pos + rows - 1);
    }
    if (!kFill && (threadIdx.x & 31) == 0) {
      p.range_offsets[item + 1] = count;
      p.column_offsets[item + 1] = 0;
    }
  }
}

}  // namespace millipede::block_ranges_cuda
