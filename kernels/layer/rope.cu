#include <algorithm>
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/layer/rope.cuh"
#include "kernels/layer/rope_cuda.h"

namespace millipede {
namespace {

constexpr int kMaxThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 20;

// One block per row t (grid-strided): the row's half cos/sin pairs are computed once into shared
// memory (2 * half floats) and shared by all heads, then every (head, i) pair is rotated.
//   x [n, num_heads, 2 * half], positions [n], inv_freq [half].
__global__ void RopeKernel(float* __restrict__ x, const int64_t* __restrict__ positions,
                           const float* __restrict__ inv_freq, int64_t n, int64_t num_heads,
                           int64_t half) {
  extern __shared__ float table[];
  float* cos_t = table;
  float* sin_t = table + half;
  const int64_t pairs = num_heads * half;
  for (int64_t t = blockIdx.x; t < n; t += gridDim.x) {
    rope_cuda::FillTable(positions[t], inv_freq, half, cos_t, sin_t);
    __syncthreads();
    float* row = x + t * num_heads * 2 * half;
    for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) {
      const int64_t h = p / half, i = p - h * half;
      float* head = row + h * 2 * half;
      rope_cuda::RotatePair(head, i, half, cos_t, sin_t, &head[i], &head[i + half]);
    }
    // The table is rewritten for the next row.
    __syncthreads();
  }
}

}  // namespace

Status RopeCuda(const RopeArgs& args, cudaStream_t stream) {
  MP_RETURN_IF_ERROR(RopeCheckArgs(args));
  const int64_t n = args.x.dim(0);
  const int64_t num_heads = args.x.dim(1);
  const int64_t half = args.x.dim(2) / 2;
  if (n == 0 || num_heads == 0 || half == 0) return OkStatus();
  const size_t shared_bytes = 2 * static_cast<size_t>(half) * sizeof(float);
  // Past the 48 KiB default (head_dim 12288) a launch would need an opt-in; no model comes near.
  MP_REQUIRE(shared_bytes <= 48 * 1024, "rope: head_dim ", 2 * half, " is too large for RopeCuda");
  const int threads =
      static_cast<int>(std::clamp<int64_t>((num_heads * half + 31) / 32 * 32, 32, kMaxThreads));
  const unsigned blocks = static_cast<unsigned>(std::min(n, kMaxBlocks));
  RopeKernel<<<blocks, threads, shared_bytes, stream>>>(
      args.x.as<float>(), args.positions.as<const int64_t>(), args.inv_freq.as<const float>(), n,
      num_heads, half);
  MP_CUDA_CHECK_LAUNCH();
  return OkStatus();
}

}  // namespace millipede
