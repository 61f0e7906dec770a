#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "common/cuda_check.h"
#include "kernels/cuda_util.cuh"
#include "kernels/layer/rms_norm_cuda.h"

namespace millipede {
namespace {

constexpr int kMaxThreads = 1024;
constexpr int64_t kMaxBlocks = 1 << 20;

template <int kVec>
struct alignas(sizeof(float) * kVec) Floats {
  float v[kVec];
};

template <int kVec>
__device__ __forceinline__ Floats<kVec> LoadFloats(const float* p) {
  return *reinterpret_cast<const Floats<kVec>*>(p);
}
template <int kVec>
__device__ __forceinline__ void StoreFloats(float* p, const Floats<kVec>& f) {
  *reinterpret_cast<Floats<kVec>*>(p) = f;
}
// BF16/F16 outputs: each value rounded to nearest even, as ConvertCuda would round the F32 one.
template <int kVec>
__device__ __forceinline__ void StoreFloats(__nv_bfloat16* p, const Floats<kVec>& f) {
#pragma unroll
  for (int e = 0; e < kVec; ++e) p[e] = __float2bfloat16_rn(f.v[e]);
}
template <int kVec>
__device__ __forceinline__ void StoreFloats(__half* p, const Floats<kVec>& f) {
#pragma unroll
  for (int e = 0; e < kVec; ++e) p[e] = __float2half_rn(f.v[e]);
}

// Sum over the block, returned to every thread. blockDim.x is a multiple of 32; `partials` holds
// 32 floats of shared memory and is used once per call.
__device__ float BlockSum(float value, float* partials) {
  for (int offset = 16; offset > 0; offset >>= 1)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partials[warp] = value;
  __syncthreads();
  value = lane < static_cast<int>(blockDim.x / 32) ? partials[lane] : 0.0f;
  for (int offset = 16; offset > 0; offset >>= 1)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

// One block per row (grid-strided over rows), kVec floats per thread step. Pass 1 forms the
// row (adding x into the residual when there is one) and its sum of squares; pass 2 scales it.
// Each thread revisits exactly the elements it wrote in pass 1, which is what makes an F32 `out`
// aliasing `x` or `residual` safe (hence no __restrict__ on those three).
//   x [n, hidden], weight [hidden] of W, residual (or null) [n, hidden], out [n, hidden] of O.
template <typename W, typename O, int kVec>
__global__ void RmsNormKernel(const float* x, const W* __restrict__ weight, float* residual,
                              O* out, int64_t n, int64_t hidden, float eps) {
  __shared__ float partials[32];
  const int64_t step = static_cast<int64_t>(blockDim.x) * kVec;
  for (int64_t row = blockIdx.x; row < n; row += gridDim.x) {
    const float* x_row = x + row * hidden;
    float* residual_row = residual != nullptr ? residual + row * hidden : nullptr;
    O* out_row = out + row * hidden;
    float sum_sq = 0.0f;
    for (int64_t j = threadIdx.x * kVec; j < hidden; j += step) {
      Floats<kVec> v = LoadFloats<kVec>(x_row + j);
      if (residual_row != nullptr) {
        const Floats<kVec> r = LoadFloats<kVec>(residual_row + j);
#pragma unroll
        for (int e = 0; e < kVec; ++e) v.v[e] += r.v[e];
        StoreFloats<kVec>(residual_row + j, v);
      }
#pragma unroll
      for (int e = 0; e < kVec; ++e) sum_sq += v.v[e] * v.v[e];
    }
    sum_sq = BlockSum(sum_sq, partials);
    // The reference's fp32 steps: the mean, then 1 / sqrt(mean + eps) with IEEE sqrt and division.
    const float variance = sum_sq / static_cast<float>(hidden);
    const float inv_rms = 1.0f / sqrtf(variance + eps);
    const float* src_row = residual_row != nullptr ? residual_row : x_row;
    for (int64_t j = threadIdx.x * kVec; j < hidden; j += step) {
      Floats<kVec> v = LoadFloats<kVec>(src_row + j);
#pragma unroll
      for (int e = 0; e < kVec; ++e)
        v.v[e] = cuda_util::LoadFloat(weight, j + e) * (v.v[e] * inv_rms);
      StoreFloats<kVec>(out_row + j, v);
    }
    // partials is reused by the next row's reduction.
    __syncthreads();
  }
}

template <typename W, typename O, int kVec>
Status Launch(const RmsNormArgs& args, cudaStream_t stream) {
  const int64_t n = args.x.dim(0);
  const int64_t hidden = args.x.dim(1);
  const int64_t steps = (hidden + kVec - 1) / kVec;
  const int threads =
      static_cast<int>(std::clamp<int64_t>((steps + 31) / 32 * 32, 32, kMaxThreads));
  const unsigned blocks = static_cast<unsigned>(std::min(n, kMaxBlocks));
  RmsNormKernel<W, O, kVec><<<blocks, threads, 0, stream>>>(
      args.x.as<const float>(), args.weight.as<const W>(), args.residual.as<float>(),
      args.out.as<O>(), n, hidden, args.eps);
  MP_CUDA_CHECK_LAUNCH();
  return OkStatus();
}

}  // namespace

Status RmsNormCuda(const RmsNormArgs& args, cudaStream_t stream) {
  MP_RETURN_IF_ERROR(RmsNormCheckArgs(args));
  if (args.x.dim(0) == 0) return OkStatus();
  return cuda_util::VisitFloatDType(args.weight.dtype, "rms_norm weight", [&](auto weight_tag) {
    using W = typename decltype(weight_tag)::type;
    // RmsNormCheckArgs allows F32, BF16 and F16 outputs only.
    return cuda_util::VisitFloatDType(args.out.dtype, "rms_norm out", [&](auto out_tag) {
      using O = typename decltype(out_tag)::type;
      if constexpr (std::is_same_v<O, double>) {
        return InvalidArgumentError("rms_norm out: F64 is not supported");
      } else {
        constexpr int kVec = 4;
        const bool vectorised = args.x.dim(1) % kVec == 0 &&
                                cuda_util::IsAligned(args.x.data, sizeof(float) * kVec) &&
                                cuda_util::IsAligned(args.residual.data, sizeof(float) * kVec) &&
                                cuda_util::IsAligned(args.out.data, sizeof(O) * kVec);
        return vectorised ? Launch<W, O, kVec>(args, stream) : Launch<W, O, 1>(args, stream);
      }
    });
  });
}

}  // namespace millipede
