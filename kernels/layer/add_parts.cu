#include <algorithm>
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/layer/add_parts_cuda.h"

namespace millipede {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

// Grid-strided over the elements of one part; each thread sums its element over the parts in
// order (plain fp32 adds, as the reference: no contraction is possible) and adds the sum to out.
__global__ void AddPartsKernel(const float* __restrict__ parts, int64_t num_parts, int64_t stride,
                               float* __restrict__ out, int64_t count) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < count;
       e += step) {
    float sum = parts[e];
    for (int64_t r = 1; r < num_parts; ++r) sum += parts[r * stride + e];
    out[e] += sum;
  }
}

}  // namespace

Status AddPartsCuda(const AddPartsArgs& args, cudaStream_t stream) {
  MP_RETURN_IF_ERROR(AddPartsCheckArgs(args));
  const int64_t parts = args.parts.dim(0);
  const int64_t count = args.parts.dim(1) * args.parts.dim(2);
  if (parts == 0 || count == 0) return OkStatus();
  const int64_t stride = args.part_stride > 0 ? args.part_stride : count;
  const int64_t blocks = std::min<int64_t>((count + kThreads - 1) / kThreads, kMaxBlocks);
  AddPartsKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      args.parts.as<const float>(), parts, stride, args.out.as<float>(), count);
  MP_CUDA_CHECK_LAUNCH();
  return OkStatus();
}

}  // namespace millipede
