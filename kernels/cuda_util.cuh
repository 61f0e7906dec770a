// Internal helpers shared by the CUDA ops: widening loads of the float dtypes, picking a kernel
// instance for a runtime dtype, and a grow-only device scratch buffer. Include only from .cu
// files.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "common/cuda_check.h"
#include "common/dtype.h"
#include "common/fp8.h"
#include "common/status.h"

namespace millipede::cuda_util {

// p[i] widened to float: exact for F32, BF16 and F16; F64 rounds to nearest, like LoadAsFloat.
__device__ __forceinline__ float LoadFloat(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float LoadFloat(const __nv_bfloat16* p, int64_t i) {
  return __bfloat162float(p[i]);
}
__device__ __forceinline__ float LoadFloat(const __half* p, int64_t i) {
  return __half2float(p[i]);
}
__device__ __forceinline__ float LoadFloat(const double* p, int64_t i) {
  return static_cast<float>(p[i]);
}
// F8E4M3 (the KV cache's 8-bit type), exact.
__device__ __forceinline__ float LoadFloat(const __nv_fp8_e4m3* p, int64_t i) {
  return static_cast<float>(p[i]);
}

// p[i] = v rounded to the storage type: to nearest even (F8E4M3 saturating, common/fp8.h),
// exactly as the CPU's StoreFromFloat rounds.
__device__ __forceinline__ void StoreFloat(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void StoreFloat(__nv_bfloat16* p, int64_t i, float v) {
  p[i] = __float2bfloat16_rn(v);
}
__device__ __forceinline__ void StoreFloat(__half* p, int64_t i, float v) {
  p[i] = __float2half_rn(v);
}
__device__ __forceinline__ void StoreFloat(__nv_fp8_e4m3* p, int64_t i, float v) {
  p[i].__x = FloatToE4M3Bits(v);
}

// Calls f(std::type_identity<T>{}) with T the device storage type of a float dtype (float,
// __nv_bfloat16, __half or double), so that one generic lambda launches the matching kernel
// instance. Other dtypes are an InvalidArgument naming `what` (callers normally checked them).
template <typename F>
Status VisitFloatDType(DType dtype, const char* what, F&& f) {
  switch (dtype) {
    case DType::kF32: return f(std::type_identity<float>{});
    case DType::kBF16: return f(std::type_identity<__nv_bfloat16>{});
    case DType::kF16: return f(std::type_identity<__half>{});
    case DType::kF64: return f(std::type_identity<double>{});
    default: break;
  }
  return InvalidArgumentError(
      detail::StrCat(what, ": dtype ", DTypeName(dtype), " is not a float type"));
}

// The same for the element types of K and V (IsKvDType): float, __nv_bfloat16, __half or
// __nv_fp8_e4m3.
template <typename F>
Status VisitKvDType(DType dtype, const char* what, F&& f) {
  switch (dtype) {
    case DType::kF32:
      return f(std::type_identity<float>{});
    case DType::kBF16:
      return f(std::type_identity<__nv_bfloat16>{});
    case DType::kF16:
      return f(std::type_identity<__half>{});
    case DType::kF8E4M3:
      return f(std::type_identity<__nv_fp8_e4m3>{});
    default:
      break;
  }
  return InvalidArgumentError(detail::StrCat(what, ": dtype ", DTypeName(dtype),
                                             " is not a KV type (F32, BF16, F16 or F8_E4M3)"));
}

// Eight 16-bit values (BF16 or F16, one 16-byte load) widened to floats.
template <typename T>
__device__ __forceinline__ void Widen8(uint4 raw, float* out) {
  using Pair = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;
  const Pair* pairs = reinterpret_cast<const Pair*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 f;
    if constexpr (std::is_same_v<T, __half>) {
      f = __half22float2(pairs[i]);
    } else {
      f = __bfloat1622float2(pairs[i]);
    }
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

// Eight E4M3 values (one 8-byte load) widened to floats, exactly.
template <typename T>
requires std::is_same_v<T, __nv_fp8_e4m3> __device__ __forceinline__ void Widen8(uint2 raw,
                                                                                 float* out) {
  const uint32_t in[2] = {raw.x, raw.y};
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const __half2_raw r = __nv_cvt_fp8x2_to_halfraw2(
          static_cast<__nv_fp8x2_storage_t>(in[i] >> (16 * h)), __NV_E4M3);
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&r));
      out[4 * i + 2 * h] = f.x;
      out[4 * i + 2 * h + 1] = f.y;
    }
}
// The raw type of eight elements of T (16 bytes of a 16-bit type, 8 of E4M3), Widen8's input.
template <typename T>
using Raw8 = std::conditional_t<sizeof(T) == 1, uint2, uint4>;

// True when `p` is a multiple of `bytes` (a power of two).
inline bool IsAligned(const void* p, uintptr_t bytes) {
  return (reinterpret_cast<uintptr_t>(p) & (bytes - 1)) == 0;
}

// A device buffer that only grows, for the temporaries of one op. A scratch serves one stream:
// growing waits for that stream before freeing the old buffer, since work queued earlier may
// still use it. Capacities are powers of two so a slowly rising demand reallocates rarely.
class DeviceScratch {
 public:
  DeviceScratch() = default;
  ~DeviceScratch() {
    if (data_ != nullptr) cudaFree(data_);
  }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  // How many times the memory moved (recordings of ops that use it go stale when it does).
  uint64_t generation() const { return generation_; }

  // Makes data() hold at least `bytes`; the contents are not kept.
  Status Reserve(size_t bytes, cudaStream_t stream) {
    if (bytes <= bytes_) return OkStatus();
    if (data_ != nullptr) {
      MP_CUDA_CHECK(cudaStreamSynchronize(stream));
      MP_CUDA_CHECK(cudaFree(data_));
      data_ = nullptr;
      bytes_ = 0;
    }
    size_t capacity = size_t{1} << 16;
    while (capacity < bytes) capacity *= 2;
    MP_CUDA_CHECK(cudaMalloc(&data_, capacity));
    bytes_ = capacity;
    ++generation_;
    return OkStatus();
  }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  uint64_t generation_ = 0;
};

}  // namespace millipede::cuda_util
