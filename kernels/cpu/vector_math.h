// Vectorised row helpers of the CPU kernels: dtype widening and narrowing, exp, max, dot. Each is
// compiled for several x86-64 levels (AVX-512, AVX2 + FMA, baseline) and picked when the program
// loads, so one binary runs anywhere and uses the widest vectors the machine has.
#pragma once

#include <bit>
#include <cstdint>

#include "common/dtype.h"

// Clones a function for x86-64-v4 (AVX-512), x86-64-v3 (AVX2, FMA, F16C) and the baseline; the
// loader picks one per machine. Elsewhere (or with another compiler) the plain build only.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MP_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MP_CPU_CLONES
#endif

namespace millipede::cpu {

// e^x in fp32 without branches, so loops over it vectorise: x = k ln2 + r with |r| <= ln2 / 2,
// e^r by its Taylor series to r^7 (truncation error < 6e-9 relative), scaled by 2^k through the
// exponent bits. Relative error < 1e-7 (about 1 ulp) for x in [-87, 88]; 0 below -87 (where e^x
// is under FLT_MIN; -inf gives 0, as a masked score must) and +inf above 88.
[[gnu::always_inline]] inline float ExpF(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  // ln 2 split so that k * kLn2Hi is exact for |k| < 2^9 (kLn2Hi has 16 significant bits).
  constexpr float kLn2Hi = 0.693145751953125f;
  constexpr float kLn2Lo = 1.42860682030941723212e-6f;
  // Adding and subtracting 1.5 * 2^23 rounds to the nearest integer (|x log2e| < 2^22).
  constexpr float kRound = 12582912.0f;
  // Clamped (NaN for -inf would make the integer conversion below undefined); the selects at the
  // end give the lanes outside the range their values.
  float xc = x > -87.0f ? x : -87.0f;
  xc = xc < 88.0f ? xc : 88.0f;
  const float k = (xc * kLog2e + kRound) - kRound;
  const float r = (xc - k * kLn2Hi) - k * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float two_k =
      std::bit_cast<float>(static_cast<uint32_t>(static_cast<int32_t>(k) + 127) << 23);
  const float y = x < -87.0f ? 0.0f : p * two_k;
  return x > 88.0f ? __builtin_inff() : y;
}

// out[i] = float(src[offset + i]) for i < count; src holds F32, BF16, F16 or F64 elements.
void WidenRow(const void* src, DType dtype, int64_t offset, int64_t count, float* out);
// dst[offset + i] = src[i] rounded to nearest even into dst's F32, BF16 or F16 elements,
// bit for bit what StoreFromFloat writes for finite values.
void NarrowRow(const float* src, int64_t count, void* dst, DType dtype, int64_t offset);

// row[i] = e^(row[i] - shift) for i < n (ExpF; -inf entries give 0); returns their sum.
float ExpShiftedSum(float* row, int64_t n, float shift);
// max_i row[i]; -inf when n == 0.
float RowMax(const float* row, int64_t n);
// row[i] *= s.
void ScaleRow(float* row, int64_t n, float s);
// sum_i a[i] * b[i], in fp32 with several partial sums.
float Dot(const float* a, const float* b, int64_t n);

}  // namespace millipede::cpu
