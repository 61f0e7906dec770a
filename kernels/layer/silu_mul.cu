#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "common/cuda_check.h"
#include "kernels/cuda_util.cuh"
#include "kernels/layer/silu_mul_cuda.h"

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

// Group g of kVec outputs: F32 stored as one vector, BF16/F16 rounded to nearest even (as
// ConvertCuda would round the F32 values).
template <int kVec>
__device__ __forceinline__ void StoreGroup(float* out, int64_t g, const Floats<kVec>& c) {
  reinterpret_cast<Floats<kVec>*>(out)[g] = c;
}
template <int kVec>
__device__ __forceinline__ void StoreGroup(__nv_bfloat16* out, int64_t g, const Floats<kVec>& c) {
#pragma unroll
  for (int e = 0; e < kVec; ++e) out[g * kVec + e] = __float2bfloat16_rn(c.v[e]);
}
template <int kVec>
__device__ __forceinline__ void StoreGroup(__half* out, int64_t g, const Floats<kVec>& c) {
#pragma unroll
  for (int e = 0; e < kVec; ++e) out[g * kVec + e] = __float2half_rn(c.v[e]);
}

// Grid-strided over groups of kVec elements; count % kVec == 0 and every buffer is aligned to
// kVec elements. No __restrict__: an F32 `out` may alias `gate` or `up` (each element is read,
// then written, by one thread).
template <typename O, int kVec>
__global__ void SiluMulKernel(const float* gate, const float* up, O* out, int64_t groups) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups;
       g += stride) {
    const Floats<kVec> a = reinterpret_cast<const Floats<kVec>*>(gate)[g];
    const Floats<kVec> b = reinterpret_cast<const Floats<kVec>*>(up)[g];
    Floats<kVec> c;
#pragma unroll
    for (int e = 0; e < kVec; ++e) c.v[e] = SiluMul(a.v[e], b.v[e]);
    StoreGroup<kVec>(out, g, c);
  }
}

template <typename O, int kVec>
Status Launch(const SiluMulArgs& args, int64_t count, cudaStream_t stream) {
  const int64_t groups = count / kVec;
  const int64_t blocks = std::min<int64_t>((groups + kThreads - 1) / kThreads, kMaxBlocks);
  SiluMulKernel<O, kVec><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      args.gate.as<const float>(), args.up.as<const float>(), args.out.as<O>(), groups);
  MP_CUDA_CHECK_LAUNCH();
  return OkStatus();
}

}  // namespace

Status SiluMulCuda(const SiluMulArgs& args, cudaStream_t stream) {
  MP_RETURN_IF_ERROR(SiluMulCheckArgs(args));
  const int64_t count = args.out.NumElements();
  if (count == 0) return OkStatus();
  // SiluMulCheckArgs allows F32, BF16 and F16 outputs only.
  return cuda_util::VisitFloatDType(args.out.dtype, "silu_mul out", [&](auto tag) {
    using O = typename decltype(tag)::type;
    if constexpr (std::is_same_v<O, double>) {
      return InvalidArgumentError("silu_mul out: F64 is not supported");
    } else {
      constexpr int kVec = 4;
      const bool vectorised = count % kVec == 0 &&
                              cuda_util::IsAligned(args.gate.data, sizeof(float) * kVec) &&
                              cuda_util::IsAligned(args.up.data, sizeof(float) * kVec) &&
                              cuda_util::IsAligned(args.out.data, sizeof(O) * kVec);
      return vectorised ? Launch<O, kVec>(args, count, stream)
                        : Launch<O, 1>(args, count, stream);
    }
  });
}

}  // namespace millipede
