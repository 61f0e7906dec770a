#include "common/dtype.h"

#include <cmath>

namespace millipede {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF64: case DType::kI64: return 8;
    case DType::kF32: case DType::kI32: return 4;
    case DType::kF16: case DType::kBF16: case DType::kI16: return 2;
    case DType::kI8: case DType::kU8: case DType::kBool: case DType::kF8E4M3: return 1;
  }
  return 0;
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kF64: return "F64";
    case DType::kI8: return "I8";
    case DType::kU8: return "U8";
    case DType::kI16: return "I16";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
    case DType::kBool: return "BOOL";
    case DType::kF8E4M3: return "F8_E4M3";
  }
  return "?";
}

StatusOr<DType> ParseDType(std::string_view name) {
  static constexpr DType kAll[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64, DType::kI8,
                                   DType::kU8,  DType::kI16, DType::kI32,  DType::kI64, DType::kBool,
                                   DType::kF8E4M3};
  for (DType d : kAll)
    if (name == DTypeName(d)) return d;
  return InvalidArgumentError("unknown dtype \"" + std::string(name) + "\"");
}

StatusOr<DType> ParseFloatDTypeName(std::string_view name) {
  if (name == "bf16" || name == "bfloat16" || name == "BF16") return DType::kBF16;
  if (name == "fp16" || name == "f16" || name == "float16" || name == "F16") return DType::kF16;
  if (name == "fp32" || name == "f32" || name == "float32" || name == "F32") return DType::kF32;
  return InvalidArgumentError("unknown float dtype \"" + std::string(name) +
                              "\" (expected bf16, fp16 or fp32)");
}

StatusOr<DType> ParseKvDTypeName(std::string_view name) {
  if (name == "fp8" || name == "fp8_e4m3" || name == "f8e4m3" || name == "F8_E4M3")
    return DType::kF8E4M3;
  auto d = ParseFloatDTypeName(name);
  if (!d.ok())
    return InvalidArgumentError("unknown KV dtype \"" + std::string(name) +
                                "\" (expected bf16, fp16, fp32 or fp8)");
  return d;
}

Float16 FloatToFloat16(float f) {
  uint32_t u = FloatBits(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return {static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu))};
  if (abs >= 0x477ff000u) return {static_cast<uint16_t>(sign | 0x7c00u)};  // rounds to >= 65520
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero): value = abs_float * 2^24 rounded to an integer, RNE.
    if (abs < 0x33000000u) return {sign};  // below half the smallest subnormal: rounds to 0
    uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    // value = mant * 2^(exp-150); in units of 2^-24 (the smallest subnormal) that is
    // mant * 2^(exp-126), i.e. a right shift by 126-exp, which lies in [14, 24] here.
    int shift = 126 - static_cast<int>(abs >> 23);
    uint32_t q = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return {static_cast<uint16_t>(sign | q)};
  }
  // Normal: rebias exponent (127 -> 15) and round the 13 dropped mantissa bits to nearest even.
  uint32_t v = abs - 0x38000000u;  // exponent - 112 in place
  uint32_t q = v >> 13;
  uint32_t rem = v & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q;  // may carry into the exponent: fine
  return {static_cast<uint16_t>(sign | q)};
}

float Float16ToFloat(Float16 h) {
  uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  uint32_t exp = (h.bits >> 10) & 0x1fu;
  uint32_t mant = h.bits & 0x3ffu;
  if (exp == 0x1f) return BitsToFloat(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  return BitsToFloat(sign | ((exp + 112u) << 23) | (mant << 13));
}

Status ConvertFloats(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n) {
  MP_REQUIRE(IsLoadableDType(src_dtype) && IsLoadableDType(dst_dtype), "ConvertFloats: ",
             DTypeName(src_dtype), " -> ", DTypeName(dst_dtype), " is not a float conversion");
  if (src_dtype == dst_dtype) {
    std::memcpy(dst, src, n * DTypeSize(src_dtype));
    return OkStatus();
  }
  for (size_t i = 0; i < n; ++i) StoreFromFloat(dst, dst_dtype, i, LoadAsFloat(src, src_dtype, i));
  return OkStatus();
}

}  // namespace millipede
