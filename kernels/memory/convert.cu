#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "common/cuda_check.h"
#include "kernels/memory/convert_cuda.h"

namespace millipede {
namespace {

template <typename T>
__device__ float Load(const T* p, int64_t i);
template <>
__device__ float Load<float>(const float* p, int64_t i) { return p[i]; }
template <>
__device__ float Load<__nv_bfloat16>(const __nv_bfloat16* p, int64_t i) {
  return __bfloat162float(p[i]);
}
template <>
__device__ float Load<__half>(const __half* p, int64_t i) { return __half2float(p[i]); }

// The cuda_bf16/cuda_fp16 conversions round to nearest even, as common/dtype.h does.
template <typename T>
__device__ void Store(T* p, int64_t i, float v);
template <>
__device__ void Store<float>(float* p, int64_t i, float v) { p[i] = v; }
template <>
__device__ void Store<__nv_bfloat16>(__nv_bfloat16* p, int64_t i, float v) {
  p[i] = __float2bfloat16_rn(v);
}
template <>
__device__ void Store<__half>(__half* p, int64_t i, float v) { p[i] = __float2half_rn(v); }

template <typename S, typename D>
__global__ void ConvertKernel(const S* __restrict__ src, D* __restrict__ dst, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    Store(dst, i, Load(src, i));
}

template <typename S, typename D>
Status Launch(ConstTensorView src, TensorView dst, cudaStream_t stream) {
  const int64_t n = src.NumElements();
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 8192);
  ConvertKernel<S, D><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      static_cast<const S*>(src.data), static_cast<D*>(dst.data), n);
  MP_CUDA_CHECK_LAUNCH();
  return OkStatus();
}

template <typename S>
Status LaunchTo(ConstTensorView src, TensorView dst, cudaStream_t stream) {
  switch (dst.dtype) {
    case DType::kF32: return Launch<S, float>(src, dst, stream);
    case DType::kBF16: return Launch<S, __nv_bfloat16>(src, dst, stream);
    case DType::kF16: return Launch<S, __half>(src, dst, stream);
    default: break;
  }
  return UnimplementedError(std::string("convert on the GPU: no ") + DTypeName(dst.dtype) +
                            " output");
}

}  // namespace

Status ConvertCuda(ConstTensorView src, TensorView dst, cudaStream_t stream) {
  MP_RETURN_IF_ERROR(ConvertCheckArgs(src, dst));
  if (src.NumElements() == 0) return OkStatus();
  if (src.dtype == dst.dtype) {
    if (src.data != dst.data)
      MP_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.NumBytes(), cudaMemcpyDeviceToDevice,
                                    stream));
    return OkStatus();
  }
  switch (src.dtype) {
    case DType::kF32: return LaunchTo<float>(src, dst, stream);
    case DType::kBF16: return LaunchTo<__nv_bfloat16>(src, dst, stream);
    case DType::kF16: return LaunchTo<__half>(src, dst, stream);
    default: break;
  }
  return UnimplementedError(std::string("convert on the GPU: no ") + DTypeName(src.dtype) +
                            " input");
}

}  // namespace millipede
