#include <algorithm>
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/cuda_util.cuh"
#include "kernels/silu_mul_cuda.h"

namespace millipede {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 8192;

template <int kVec>
struct alignas(sizeof(float) * kVec) Floats {
  float v[kVec];
};

// For gate << 0, expf(-gate) overflows to inf and the quotient is -0, as in the reference; gate
// = -inf gives NaN (-inf / inf) there too.
__device__ __forceinline__ float SiluMul(float gate, float up) {
  return gate / (1.0f + expf(-gate)) * up;
}

// Grid-strided over groups of kVec elements; count % kVec == 0 and every buffer is aligned to
// kVec floats. No __restrict__: `out` may alias `gate` or `up` (each element is read, then
// written, by one thread).
template <int kVec>
__global__ void SiluMulKernel(const float* gate, const float* up, float* out, int64_t groups) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups;
       g += stride) {
    const Floats<kVec> a = reinterpret_cast<const Floats<kVec>*>(gate)[g];
    const Floats<kVec> b = reinterpret_cast<const Floats<kVec>*>(up)[g];
    Floats<kVec> c;
#pragma unroll
    for (int e = 0; e < kVec; ++e) c.v[e] = SiluMul(a.v[e], b.v[e]);
    reinterpret_cast<Floats<kVec>*>(out)[g] = c;
  }
}

template <int kVec>
Status Launch(const SiluMulArgs& args, int64_t count, cudaStream_t stream) {
  const int64_t groups = count / kVec;
  const int64_t blocks = std::min<int64_t>((groups + kThreads - 1) / kThreads, kMaxBlocks);
  SiluMulKernel<kVec><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      args.gate.as<const float>(), args.up.as<const float>(), args.out.as<float>(), groups);
  MP_CUDA_CHECK_LAUNCH();
  return OkStatus();
}

}  // namespace

Status SiluMulCuda(const SiluMulArgs& args, cudaStream_t stream) {
  MP_RETURN_IF_ERROR(SiluMulCheckArgs(args));
  const int64_t count = args.out.NumElements();
  if (count == 0) return OkStatus();
  constexpr int kVec = 4;
  const bool vectorised = count % kVec == 0 &&
                          cuda_util::IsAligned(args.gate.data, sizeof(float) * kVec) &&
                          cuda_util::IsAligned(args.up.data, sizeof(float) * kVec) &&
                          cuda_util::IsAligned(args.out.data, sizeof(float) * kVec);
  return vectorised ? Launch<kVec>(args, count, stream) : Launch<1>(args, count, stream);
}

}  // namespace millipede
