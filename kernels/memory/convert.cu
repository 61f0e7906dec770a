#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "common/cuda_check.h"
#include "kernels/cuda_util.cuh"
#include "kernels/memory/convert_cuda.h"

namespace millipede {
namespace {

// Exact widening; stores round to nearest even as common/dtype.h does (F8E4M3 saturating).
using cuda_util::LoadFloat;
using cuda_util::StoreFloat;

template <typename S, typename D>
__global__ void ConvertKernel(const S* __restrict__ src, D* __restrict__ dst, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    StoreFloat(dst, i, LoadFloat(src, i));
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
    case DType::kF8E4M3:
      return Launch<S, __nv_fp8_e4m3>(src, dst, stream);
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
    case DType::kF8E4M3:
      return LaunchTo<__nv_fp8_e4m3>(src, dst, stream);
    default: break;
  }
  return UnimplementedError(std::string("convert on the GPU: no ") + DTypeName(src.dtype) +
                            " input");
}

}  // namespace millipede
