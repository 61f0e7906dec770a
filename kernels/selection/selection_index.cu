#include <algorithm>
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/selection/selection_index_cuda.h"

namespace millipede {
namespace {

constexpr int kThreads = 256;

// Thread t is slot t / kv_heads of head t % kv_heads.
//   chosen [kv_heads, slots], index [blocks, slots * kv_heads], counts [kv_heads].
__global__ void SelectionIndexKernel(const int32_t* __restrict__ chosen, int64_t kv_heads,
                                     int64_t slots, int64_t blocks, int64_t block_stride,
                                     int64_t* __restrict__ index, int32_t* __restrict__ counts) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= slots * kv_heads) return;
  const int64_t i = t / kv_heads, g = t - i * kv_heads;
  const int32_t row = chosen[g * slots + i];
  // Chosen rows come first: the count is where they end (0 when slot 0 is empty).
  const bool last = row >= 0 && (i + 1 == slots || chosen[g * slots + i + 1] < 0);
  if (last) counts[g] = static_cast<int32_t>(i + 1);
  if (i == 0 && row < 0) counts[g] = 0;
  const int64_t entry = static_cast<int64_t>(max(row, 0)) * kv_heads + g;
  for (int64_t b = 0; b < blocks; ++b) index[b * slots * kv_heads + t] = b * block_stride + entry;
}

__global__ void ZeroCountsKernel(int32_t* __restrict__ counts, int64_t kv_heads) {
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g < kv_heads) counts[g] = 0;
}

}  // namespace

Status SelectionIndexCuda(const SelectionIndexArgs& args, cudaStream_t stream) {
  MP_RETURN_IF_ERROR(SelectionIndexCheckArgs(args));
  const int64_t kv_heads = args.chosen.dim(0), slots = args.chosen.dim(1);
  const int64_t blocks = args.index.dim(0), threads = slots * kv_heads;
  if (kv_heads == 0) return OkStatus();
  if (threads == 0) {
    ZeroCountsKernel<<<static_cast<unsigned>((kv_heads + kThreads - 1) / kThreads), kThreads, 0,
                       stream>>>(args.counts.as<int32_t>(), kv_heads);
    MP_CUDA_CHECK_LAUNCH();
    return OkStatus();
  }
  const int64_t grid = (threads + kThreads - 1) / kThreads;
  MP_REQUIRE(grid < (int64_t{1} << 31), "selection index: ", slots, " slots is too many");
  SelectionIndexKernel<<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(
      args.chosen.as<const int32_t>(), kv_heads, slots, blocks, args.block_stride,
      args.index.as<int64_t>(), args.counts.as<int32_t>());
  MP_CUDA_CHECK_LAUNCH();
  return OkStatus();
}

}  // namespace millipede
