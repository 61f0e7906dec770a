#include <algorithm>
#include <cstdint>
#include <utility>

#include "common/cuda_check.h"
#include "kernels/sparse_index/block_sparse_index.cuh"
#include "kernels/sparse_index/block_sparse_index_cuda.h"

namespace millipede {
namespace {

using namespace sparse_index_cuda;  // NOLINT(build/namespaces): the builders' shared internals

constexpr int kThreads = 256;

// Per tile (well-formed ones; BeginChecks reports the others): within one block of positions,
// inside the blocks, and a query block with queries.
__global__ void CheckTilesKernel(const int64_t* tiles, int64_t n_tiles, int64_t block,
                                 int64_t num_blocks, const float* q_counts, ErrorWord* error) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = blockIdx.x * blockDim.x + threadIdx.x; t < n_tiles; t += stride) {
    const int64_t rows = tiles[3 * t + 1] - tiles[3 * t], pos = tiles[3 * t + 2];
    if (rows < 1 || pos < 0) continue;
    const int64_t qb = pos / block;
    if ((pos + rows - 1) / block != qb) {
      Report(error, kTileCrossesBlock, t, pos, block);
    } else if (qb >= num_blocks) {
      Report(error, kTileBeyondBlocks, t, qb, num_blocks);
    } else if (!(q_counts[qb] > 0.0f)) {
      Report(error, kEmptyQueryBlock, t, qb);
    }
  }
}

struct RangeParams {
  const int64_t* tiles;
  int64_t n_tiles;
  const int64_t* runs;
  int64_t n_runs;
  const int64_t* top;  // [heads], device
  int64_t heads, num_blocks, block, words;
  const uint32_t* kept;  // [heads * n_tiles, words]
  bool skip_absent;
  int64_t* range_offsets;
  int64_t* column_offsets;
  int64_t* ranges;  // fill pass: [ranges_rows, 3]
  int64_t ranges_rows;
  ErrorWord* error;
};

// The last block of the run of kept blocks that starts at kb (bits beyond the query block are
// clear, so a run never passes it).
__device__ int64_t RunLast(const uint32_t* bits, int64_t n_words, int64_t kb) {
  int64_t w = kb >> 5;
  uint32_t zeros = ~bits[w] & (~0u << (kb & 31));
  while (zeros == 0) {
    if (++w == n_words) return n_words * 32 - 1;
    zeros = ~bits[w];
  }
  return w * 32 + __ffs(zeros) - 2;
}

// Item (g, t)'s ranges, tile positions ending at b: each run of kept blocks [kb0, kb1] covers
// positions [kb0 * block, min((kb1 + 1) * block, b + 1)). Lane l takes bitmap word w0 + l, so
// runs come out in position order; a run starts at a set bit whose lower neighbour is clear.
template <bool kFill>
__device__ int64_t ItemRanges(const RangeParams& p, int64_t item, int64_t g, int64_t t, int64_t qb,
                              int64_t b) {
  const int lane = threadIdx.x & 31;
  const uint32_t* bits = p.kept + item * p.words;
  const int64_t n_words = qb / 32 + 1;
  const int64_t base = kFill ? p.range_offsets[item] : 0;
  int64_t count = 0;
  for (int64_t w0 = 0; w0 < n_words; w0 += 32) {
    const int64_t w = w0 + lane;
    const uint32_t word = w < n_words ? bits[w] : 0;
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

// One warp per item in CSR order: counts at offsets[item + 1] (count pass; no columns), or
// ranges written from offsets[item] (fill pass).
template <bool kFill>
__global__ void __launch_bounds__(kThreads) RangesKernel(RangeParams p) {
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (kThreads / 32);
  for (int64_t item = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / 32;
       item < p.heads * p.n_tiles; item += warps) {
    const int64_t g = item / p.n_tiles, t = item - g * p.n_tiles;
    const int64_t rows = p.tiles[3 * t + 1] - p.tiles[3 * t], pos = p.tiles[3 * t + 2];
    const int64_t qb = pos >= 0 ? pos / p.block : -1;
    int64_t count = 0;
    if (p.top[g] > 0 && rows >= 1 && rows <= kSparseTileRows && qb >= 0 && qb < p.num_blocks &&
        (pos + rows - 1) / p.block == qb)  // else empty, or reported by the checks
      count = ItemRanges<kFill>(p, item, g, t, qb, pos + rows - 1);
    if (!kFill && (threadIdx.x & 31) == 0) {
      p.range_offsets[item + 1] = count;
      p.column_offsets[item + 1] = 0;
    }
  }
}

// The count pass's arguments as its fill pass must repeat them (block_sparse_index.h), fill buffers
// aside.
CallFingerprint Fingerprint(const BlockSparseIndexArgs& args) {
  CallFingerprint f;
  f.Add(int64_t{1}).Add(args.tiles).Add(args.runs).Add(args.q_sums).Add(args.q_counts);
  f.Add(args.k_sums).Add(args.k_counts).Add(args.block).Add(args.group).Add(args.skip_absent);
  f.Add(args.out.range_offsets).Add(args.out.column_offsets);
  for (int64_t g = 0; g < args.q_sums.dim(1); ++g) f.Add(args.top_blocks[g]);
  return f;
}

// The kept-block bitmaps into ws.kept (tile checks, then the selection).
Status SelectBlocks(const BlockSparseIndexArgs& args, const int64_t* top, int64_t max_top,
                    int64_t words, SparseIndexCudaWorkspace::Impl& ws, cudaStream_t stream) {
  const int64_t num_blocks = args.q_sums.dim(0), n_tiles = args.tiles.dim(0);
  const int64_t items = args.q_sums.dim(1) * n_tiles;
  CheckTilesKernel<<<static_cast<unsigned>(std::min<int64_t>((n_tiles + 255) / 256, 1024)),
                     kThreads, 0, stream>>>(args.tiles.as<const int64_t>(), n_tiles, args.block,
                                            num_blocks, args.q_counts.as<const float>(), ws.error);
  MP_CUDA_CHECK_LAUNCH();
  MP_RETURN_IF_ERROR(
      ws.kept.Reserve(static_cast<size_t>(items * words) * sizeof(uint32_t), stream));
  return block_sparse_cuda::Select(args, top, max_top, static_cast<uint32_t*>(ws.kept.data()),
                                   words, ws, stream);
}

}  // namespace

Status BlockSparseIndexCuda(const BlockSparseIndexArgs& args, SparseIndexCudaWorkspace& workspace,
                            cudaStream_t stream) {
  MP_RETURN_IF_ERROR(BlockSparseIndexCheckArgs(args));
  SparseIndexCudaWorkspace::Impl& ws = workspace.impl();
  const int64_t num_blocks = args.q_sums.dim(0), heads = args.q_sums.dim(1);
  const int64_t n_tiles = args.tiles.dim(0), items = heads * n_tiles;
  const int64_t max_top =
      heads > 0 ? *std::max_element(args.top_blocks, args.top_blocks + heads) : 0;
  const int64_t words = num_blocks / 32 + 1;
  CallFingerprint call = Fingerprint(args);
  // Reuse: the count pass's bitmaps (ws.kept), budgets (ws.heads) and offsets are still in place.
  const bool reuse = ReusesCountPass(ws, call, args.out, args.inputs_unchanged_since_count);
  MP_RETURN_IF_ERROR(BeginChecks(ws, args.tiles, args.runs, stream));
  MP_RETURN_IF_ERROR(
      ws.heads.Reserve(static_cast<size_t>(std::max<int64_t>(heads, 1)) * 8, stream));
  const int64_t* top = static_cast<const int64_t*>(ws.heads.data());
  if (heads > 0 && !reuse)
    MP_CUDA_CHECK(cudaMemcpyAsync(ws.heads.data(), args.top_blocks, heads * sizeof(int64_t),
                                  cudaMemcpyHostToDevice, stream));
  const bool select = items > 0 && max_top > 0;
  if (select && !reuse) MP_RETURN_IF_ERROR(SelectBlocks(args, top, max_top, words, ws, stream));
  const bool fill = !args.out.CountPass();
  RangeParams p{args.tiles.as<const int64_t>(),
                n_tiles,
                args.runs.as<const int64_t>(),
                args.runs.dim(0),
                top,
                heads,
                num_blocks,
                args.block,
                words,
                select ? static_cast<const uint32_t*>(ws.kept.data()) : nullptr,
                args.skip_absent,
                args.out.range_offsets.as<int64_t>(),
                args.out.column_offsets.as<int64_t>(),
                fill ? args.out.ranges.as<int64_t>() : nullptr,
                fill ? args.out.ranges.dim(0) : 0,
                ws.error};
  if (!reuse) {
    if (items > 0) {
      RangesKernel<false><<<WarpBlocks(items), kThreads, 0, stream>>>(p);
      MP_CUDA_CHECK_LAUNCH();
    }
    MP_RETURN_IF_ERROR(ScanOffsets(ws, p.range_offsets, items, stream));
    MP_RETURN_IF_ERROR(ScanOffsets(ws, p.column_offsets, items, stream));
  }
  if (fill) {
    MP_RETURN_IF_ERROR(CheckFillSizes(ws, args.out, items, stream));
    if (items > 0) {
      RangesKernel<true><<<WarpBlocks(items), kThreads, 0, stream>>>(p);
      MP_CUDA_CHECK_LAUNCH();
    }
  }
  return FinishBuild(ws, "block_sparse_index", args.out, std::move(call), stream);
}

}  // namespace millipede
