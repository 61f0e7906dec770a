// Element types and exact float conversions (round to nearest even, NaN and Inf preserved).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "common/fp8.h"
#include "common/status.h"

namespace millipede {

// kF8E4M3: FP8 E4M3 (common/fp8.h), a storage type of the KV cache only: loads and stores go
// through float like the 16-bit types, but it is not one of the float types of weights and
// activations (IsFloatDType is false).
enum class DType : uint8_t { kF32, kF16, kBF16, kF64, kI8, kU8, kI16, kI32, kI64, kBool, kF8E4M3 };

// Bytes per element.
size_t DTypeSize(DType dtype);
// The safetensors spelling: "F32", "F16", "BF16", "F64", "I8", "U8", "I16", "I32", "I64", "BOOL",
// "F8_E4M3".
const char* DTypeName(DType dtype);
// Parses the safetensors spelling (exact, case-sensitive).
StatusOr<DType> ParseDType(std::string_view name);
// Parses a user-facing name: "bf16"/"bfloat16", "fp16"/"f16"/"float16", "fp32"/"f32"/"float32".
StatusOr<DType> ParseFloatDTypeName(std::string_view name);
// Parses a KV cache element type: the names above, or "fp8"/"fp8_e4m3"/"f8e4m3".
StatusOr<DType> ParseKvDTypeName(std::string_view name);
inline bool IsFloatDType(DType d) {
  return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16 || d == DType::kF64;
}
// The element types a KV cache may hold (and attention's K and V): F32, BF16, F16, F8E4M3.
inline bool IsKvDType(DType d) {
  return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16 || d == DType::kF8E4M3;
}
// A float type or F8E4M3: what LoadAsFloat, StoreFromFloat and ConvertFloats take.
inline bool IsLoadableDType(DType d) { return IsFloatDType(d) || d == DType::kF8E4M3; }

// 16-bit storage types. They hold raw bits; arithmetic goes through float.
struct BFloat16 {
  uint16_t bits;
};
struct Float16 {
  uint16_t bits;
};

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// float -> bf16, round to nearest even; NaN stays a quiet NaN of the same sign.
inline BFloat16 FloatToBFloat16(float f) {
  uint32_t u = FloatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {static_cast<uint16_t>((u >> 16) | 0x0040u)};
  uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
  return {static_cast<uint16_t>((u + rounding_bias) >> 16)};
}
inline float BFloat16ToFloat(BFloat16 h) { return BitsToFloat(static_cast<uint32_t>(h.bits) << 16); }

// float -> IEEE half, round to nearest even, with subnormals, overflow to Inf and NaN preserved.
Float16 FloatToFloat16(float f);
float Float16ToFloat(Float16 h);

// Reads element i of a buffer of the given float dtype as float.
inline float LoadAsFloat(const void* data, DType dtype, size_t i) {
  switch (dtype) {
    case DType::kF32: return static_cast<const float*>(data)[i];
    case DType::kBF16: return BFloat16ToFloat(static_cast<const BFloat16*>(data)[i]);
    case DType::kF16: return Float16ToFloat(static_cast<const Float16*>(data)[i]);
    case DType::kF64: return static_cast<float>(static_cast<const double*>(data)[i]);
    case DType::kF8E4M3: return E4M3BitsToFloat(static_cast<const uint8_t*>(data)[i]);
    default: return 0.0f;  // callers check IsLoadableDType first
  }
}
// Writes a float into element i of a buffer of the given float dtype (rounding to nearest even).
inline void StoreFromFloat(void* data, DType dtype, size_t i, float v) {
  switch (dtype) {
    case DType::kF32: static_cast<float*>(data)[i] = v; break;
    case DType::kBF16: static_cast<BFloat16*>(data)[i] = FloatToBFloat16(v); break;
    case DType::kF16: static_cast<Float16*>(data)[i] = FloatToFloat16(v); break;
    case DType::kF64: static_cast<double*>(data)[i] = v; break;
    case DType::kF8E4M3: static_cast<uint8_t*>(data)[i] = FloatToE4M3Bits(v); break;
    default: break;
  }
}
// Converts n elements between float dtypes.
Status ConvertFloats(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n);

}  // namespace millipede
