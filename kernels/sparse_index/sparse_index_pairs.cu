#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/sparse_index/sparse_index_pairs_cuda.h"

namespace millipede {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__global__ void SparseIndexPairsKernel(const int64_t* __restrict__ tiles, int64_t n_tiles,
                                       int64_t items, const int64_t* __restrict__ range_offsets,
                                       const int64_t* __restrict__ ranges,
                                       const int64_t* __restrict__ column_offsets,
                                       const int64_t* __restrict__ columns,
                                       unsigned long long* __restrict__ pairs) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (item >= items) return;  // whole warps leave together
  const int lane = threadIdx.x % 32;
  const int64_t* tile = tiles + (item % n_tiles) * 3;
  const int64_t q_first = tile[2], q_count = tile[1] - tile[0];
  int64_t sum = 0;
  for (int64_t r = range_offsets[item] + lane; r < range_offsets[item + 1]; r += 32) {
    const int64_t* range = ranges + r * 3;
    sum += SparseRangePairs(range[2], range[2] + range[1] - range[0], q_first, q_count);
  }
  for (int64_t c = column_offsets[item] + lane; c < column_offsets[item + 1]; c += 32)
    sum += SparseRangePairs(columns[c * 2 + 1], columns[c * 2 + 1] + 1, q_first, q_count);
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane == 0 && sum != 0) atomicAdd(pairs, static_cast<unsigned long long>(sum));
}

}  // namespace

Status SparseIndexPairsCuda(const SparseIndexPairsArgs& args, cudaStream_t stream) {
  MP_RETURN_IF_ERROR(SparseIndexPairsCheckArgs(args));
  const int64_t n_tiles = args.tiles.dim(0), items = args.num_kv_heads * n_tiles;
  if (items == 0) return OkStatus();
  const int64_t grid = (items + kWarps - 1) / kWarps;
  MP_REQUIRE(grid < (int64_t{1} << 31), "sparse index pairs: ", items, " items is too many");
  SparseIndexPairsKernel<<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(
      args.tiles.as<const int64_t>(), n_tiles, items, args.index.range_offsets.as<const int64_t>(),
      args.index.ranges.as<const int64_t>(), args.index.column_offsets.as<const int64_t>(),
      args.index.columns.as<const int64_t>(),
      reinterpret_cast<unsigned long long*>(args.pairs.as<int64_t>()));
  MP_CUDA_CHECK_LAUNCH();
  return OkStatus();
}

}  // namespace millipede
