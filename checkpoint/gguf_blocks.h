// Block decoders behind DequantizeGgml (gguf_dequant.h); internal to the checkpoint library.
// Each decodes `blocks` whole blocks from `src` into `out` (blocks * block elements floats),
// in ggml's reference order of operations so that the results match it bit for bit.
#pragma once

#include <cstdint>
#include <cstring>

#include "common/dtype.h"

namespace millipede::gguf_internal {

// An IEEE half stored little-endian at `p`, as fp32 (exact).
inline float LoadHalf(const unsigned char* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return Float16ToFloat(Float16{bits});
}

void DequantizeQ4_0(const unsigned char* src, int64_t blocks, float* out);
void DequantizeQ4_1(const unsigned char* src, int64_t blocks, float* out);
void DequantizeQ5_0(const unsigned char* src, int64_t blocks, float* out);
void DequantizeQ5_1(const unsigned char* src, int64_t blocks, float* out);
void DequantizeQ8_0(const unsigned char* src, int64_t blocks, float* out);
void DequantizeQ2_K(const unsigned char* src, int64_t blocks, float* out);
void DequantizeQ3_K(const unsigned char* src, int64_t blocks, float* out);
void DequantizeQ4_K(const unsigned char* src, int64_t blocks, float* out);
void DequantizeQ5_K(const unsigned char* src, int64_t blocks, float* out);
void DequantizeQ6_K(const unsigned char* src, int64_t blocks, float* out);

}  // namespace millipede::gguf_internal
