#include "kernels/cpu/vector_math.h"

#include <cstring>
#include <limits>

namespace millipede::cpu {
namespace {

MP_CPU_CLONES void WidenBf16(const uint16_t* src, int64_t count, float* out) {
#pragma omp simd
  for (int64_t i = 0; i < count; ++i)
    out[i] = std::bit_cast<float>(static_cast<uint32_t>(src[i]) << 16);
}

MP_CPU_CLONES void WidenF16(const uint16_t* src, int64_t count, float* out) {
#pragma omp simd
  for (int64_t i = 0; i < count; ++i) out[i] = static_cast<float>(std::bit_cast<_Float16>(src[i]));
}

// FloatToBFloat16 (common/dtype.h) with its NaN branch as a select.
MP_CPU_CLONES void NarrowBf16(const float* src, int64_t count, uint16_t* dst) {
#pragma omp simd
  for (int64_t i = 0; i < count; ++i) {
    const uint32_t u = std::bit_cast<uint32_t>(src[i]);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t nan = (u >> 16) | 0x0040u;
    dst[i] = static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
  }
}

MP_CPU_CLONES void NarrowF16(const float* src, int64_t count, uint16_t* dst) {
#pragma omp simd
  for (int64_t i = 0; i < count; ++i)
    dst[i] = std::bit_cast<uint16_t>(static_cast<_Float16>(src[i]));
}

}  // namespace

void WidenRow(const void* src, DType dtype, int64_t offset, int64_t count, float* out) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(out, static_cast<const float*>(src) + offset, count * sizeof(float));
      return;
    case DType::kBF16:
      WidenBf16(static_cast<const uint16_t*>(src) + offset, count, out);
      return;
    case DType::kF16:
      WidenF16(static_cast<const uint16_t*>(src) + offset, count, out);
      return;
    case DType::kF8E4M3: {
      const uint8_t* b = static_cast<const uint8_t*>(src) + offset;
      for (int64_t i = 0; i < count; ++i) out[i] = E4M3BitsToFloat(b[i]);
      return;
    }
    case DType::kF64: {
      const double* d = static_cast<const double*>(src) + offset;
      for (int64_t i = 0; i < count; ++i) out[i] = static_cast<float>(d[i]);
      return;
    }
    default:
      return;
  }
}

void NarrowRow(const float* src, int64_t count, void* dst, DType dtype, int64_t offset) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(static_cast<float*>(dst) + offset, src, count * sizeof(float));
      return;
    case DType::kBF16:
      NarrowBf16(src, count, static_cast<uint16_t*>(dst) + offset);
      return;
    case DType::kF16:
      NarrowF16(src, count, static_cast<uint16_t*>(dst) + offset);
      return;
    case DType::kF8E4M3: {
      uint8_t* b = static_cast<uint8_t*>(dst) + offset;
      for (int64_t i = 0; i < count; ++i) b[i] = FloatToE4M3Bits(src[i]);
      return;
    }
    default:
      for (int64_t i = 0; i < count; ++i)
        StoreFromFloat(dst, dtype, static_cast<size_t>(offset + i), src[i]);
      return;
  }
}

MP_CPU_CLONES float ExpShiftedSum(float* row, int64_t n, float shift) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) {
    row[i] = ExpF(row[i] - shift);
    sum += row[i];
  }
  return sum;
}

MP_CPU_CLONES float RowMax(const float* row, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) m = row[i] > m ? row[i] : m;
  return m;
}

MP_CPU_CLONES void ScaleRow(float* row, int64_t n, float s) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) row[i] *= s;
}

MP_CPU_CLONES float Dot(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

}  // namespace millipede::cpu
