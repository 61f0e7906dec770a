// FP8 E4M3 (the OCP "e4m3fn" format: 1 sign, 4 exponent bits of bias 7, 3 mantissa bits; no
// infinities; 0x7f/0xff are NaN; largest finite 448, smallest subnormal 2^-9), the KV cache's
// 8-bit element type. One conversion routine, used by the CPU references, the CPU backend and the
// CUDA kernels alike, so that every backend quantises bit for bit the same way: round to nearest
// even, saturating to +-448 (infinities too), NaN to NaN. Compiles without CUDA.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define MP_FP8_FN __host__ __device__ __forceinline__
#else
#define MP_FP8_FN inline
#endif

namespace millipede {

// Raw bits of one E4M3 value.
struct Float8E4M3 {
  uint8_t bits;
};

MP_FP8_FN uint32_t Fp8FloatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

MP_FP8_FN float Fp8BitsToFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// float -> E4M3 bits: round to nearest even; |f| beyond 448 (and infinities) saturate to +-448;
// NaN becomes 0x7f with f's sign. Integer arithmetic only, so host and device agree exactly.
MP_FP8_FN uint8_t FloatToE4M3Bits(float f) {
  const uint32_t u = Fp8FloatBits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);
  if (abs >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7eu);  // >= 448: saturate
  if (abs < 0x3c800000u) {
    // Below 2^-6: a multiple of 2^-9 (a subnormal, or 2^-6 itself when it rounds up), that is
    // abs * 2^9 rounded to an integer, which is the result's bits.
    const int shift = 141 - static_cast<int>(abs >> 23);  // >= 21
    if (shift > 24) return sign;  // below 2^-10: rounds to zero
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<uint8_t>(sign | q);
  }
  // Normal: rebias the exponent (127 -> 7) and round the 20 dropped mantissa bits to nearest even;
  // a carry into the exponent is the right result. 448 < abs < 464 rounds to 448 (0x7e); from
  // 464 on it would round to 0x7f, the NaN, so it saturates instead.
  const uint32_t v = abs - 0x3c000000u;  // exponent - 120 in place
  uint32_t q = v >> 20;
  const uint32_t rem = v & 0xfffffu;
  if (rem > 0x80000u || (rem == 0x80000u && (q & 1u))) ++q;
  if (q > 0x7eu) q = 0x7eu;
  return static_cast<uint8_t>(sign | q);
}

// E4M3 bits -> float, exactly.
MP_FP8_FN float E4M3BitsToFloat(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t exp = (b >> 3) & 0xfu;
  const uint32_t mant = b & 0x7u;
  if (exp == 0xfu && mant == 0x7u) return Fp8BitsToFloat(sign | 0x7fc00000u);
  if (exp == 0) {
    const float v = static_cast<float>(mant) * 0.001953125f;  // mant * 2^-9, exact
    return sign ? -v : v;
  }
  return Fp8BitsToFloat(sign | ((exp + 120u) << 23) | (mant << 20));
}

inline Float8E4M3 FloatToFloat8E4M3(float f) { return {FloatToE4M3Bits(f)}; }
inline float Float8E4M3ToFloat(Float8E4M3 h) { return E4M3BitsToFloat(h.bits); }

}  // namespace millipede
