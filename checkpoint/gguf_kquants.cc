// ggml's K-quants: 256-element super-blocks split into 16- or 32-element sub-blocks, each with
// its own 4-, 6- or 8-bit scale (and min) relative to the super-block's f16 scale(s). The loops
// walk each block in ggml's storage order and evaluate every value as ggml's reference
// dequantisers do (the sub-block scale first, then scale * q - min), so results match bit for bit.
#include <cstdint>

#include "checkpoint/gguf_blocks.h"

namespace millipede::gguf_internal {
namespace {

constexpr int kQK = 256;

// Q4_K and Q5_K pack eight 6-bit scales and eight 6-bit mins into 12 bytes: bytes 0-3 hold
// scales 0-3 (low 6 bits) and the top 2 bits of scales 4-7; bytes 4-7 likewise for the mins;
// bytes 8-11 hold the low 4 bits of scales 4-7 (low nibble) and of mins 4-7 (high nibble).
inline void ScaleMinK4(int j, const unsigned char* s, int* scale, int* min) {
  if (j < 4) {
    *scale = s[j] & 63;
    *min = s[j + 4] & 63;
  } else {
    *scale = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    *min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

}  // namespace

// Q2_K (84 bytes): scales[16] (low nibble scale, high nibble min), qs[64] (2-bit values),
// f16 d, f16 dmin. Each half of 128 values uses 32 bytes of qs at 4 shifts; each shift gives 32
// values in two 16-value sub-blocks.
void DequantizeQ2_K(const unsigned char* src, int64_t blocks, float* out) {
  for (int64_t b = 0; b < blocks; ++b, src += 84) {
    const unsigned char* scales = src;
    const float d = LoadHalf(src + 80);
    const float dmin = LoadHalf(src + 82);
    for (int half = 0; half < 2; ++half) {
      const unsigned char* q = src + 16 + 32 * half;
      for (int shift = 0; shift < 8; shift += 2) {
        for (int g = 0; g < 2; ++g) {
          const unsigned char sc = *scales++;
          const float dl = d * (sc & 0xF);
          const float ml = dmin * (sc >> 4);
          for (int l = 0; l < 16; ++l) *out++ = dl * ((q[16 * g + l] >> shift) & 3) - ml;
        }
      }
    }
  }
}

// Q3_K (110 bytes): hmask[32] (the third bit, set meaning no -4 offset), qs[64] (low 2 bits),
// scales[12] (sixteen 6-bit scales, offset by 32), f16 d. Scale i has its low 4 bits in byte i
// (i < 8, low nibble) or byte i - 8 (high nibble), and its top 2 bits in byte 8 + i % 4 at bit
// 2 * (i / 4).
void DequantizeQ3_K(const unsigned char* src, int64_t blocks, float* out) {
  for (int64_t b = 0; b < blocks; ++b, src += 110) {
    const unsigned char* hmask = src;
    const unsigned char* s = src + 96;
    const float d = LoadHalf(src + 108);
    int scales[16];
    for (int i = 0; i < 16; ++i) {
      const int low = i < 8 ? (s[i] & 0xF) : (s[i - 8] >> 4);
      const int high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
      scales[i] = (low | (high << 4)) - 32;
    }
    int is = 0;
    int bit = 0;
    for (int half = 0; half < 2; ++half) {
      const unsigned char* q = src + 32 + 32 * half;
      for (int shift = 0; shift < 8; shift += 2, ++bit) {
        for (int g = 0; g < 2; ++g) {
          const float dl = d * scales[is++];
          for (int l = 0; l < 16; ++l) {
            const int k = 16 * g + l;
            const int value = ((q[k] >> shift) & 3) - (((hmask[k] >> bit) & 1) ? 0 : 4);
            *out++ = dl * value;
          }
        }
      }
    }
  }
}

// Q4_K (144 bytes): f16 d, f16 dmin, 12 bytes of packed scales and mins, qs[128]. Each 64 values
// use 32 bytes of qs: low nibbles with sub-block 2c, high nibbles with 2c + 1.
void DequantizeQ4_K(const unsigned char* src, int64_t blocks, float* out) {
  for (int64_t b = 0; b < blocks; ++b, src += 144) {
    const float d = LoadHalf(src);
    const float dmin = LoadHalf(src + 2);
    const unsigned char* s = src + 4;
    const unsigned char* q = src + 16;
    for (int c = 0; c < 4; ++c, q += 32) {
      int sc, m;
      ScaleMinK4(2 * c, s, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      ScaleMinK4(2 * c + 1, s, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *out++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *out++ = d2 * (q[l] >> 4) - m2;
    }
  }
}

// Q5_K (176 bytes): as Q4_K with qh[32] before qs[128]: the fifth bit of value l of sub-block j
// is bit j of qh[l].
void DequantizeQ5_K(const unsigned char* src, int64_t blocks, float* out) {
  for (int64_t b = 0; b < blocks; ++b, src += 176) {
    const float d = LoadHalf(src);
    const float dmin = LoadHalf(src + 2);
    const unsigned char* s = src + 4;
    const unsigned char* qh = src + 16;
    const unsigned char* q = src + 48;
    for (int c = 0; c < 4; ++c, q += 32) {
      int sc, m;
      ScaleMinK4(2 * c, s, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      ScaleMinK4(2 * c + 1, s, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      const int lo_bit = 2 * c, hi_bit = 2 * c + 1;
      for (int l = 0; l < 32; ++l) {
        *out++ = d1 * ((q[l] & 0xF) + (((qh[l] >> lo_bit) & 1) << 4)) - m1;
      }
      for (int l = 0; l < 32; ++l) {
        *out++ = d2 * ((q[l] >> 4) + (((qh[l] >> hi_bit) & 1) << 4)) - m2;
      }
    }
  }
}

// Q6_K (210 bytes): ql[128] (low 4 bits), qh[64] (high 2 bits), int8 scales[16] (one per 16
// values), f16 d. Each half of 128 values uses 64 bytes of ql and 32 of qh: value 32 * k + l
// takes the low or high nibble of ql[l] or ql[l + 32] and bits 2k..2k+1 of qh[l]; values are
// offset by 32.
void DequantizeQ6_K(const unsigned char* src, int64_t blocks, float* out) {
  for (int64_t b = 0; b < blocks; ++b, src += 210) {
    const float d = LoadHalf(src + 208);
    for (int half = 0; half < 2; ++half) {
      const unsigned char* ql = src + 64 * half;
      const unsigned char* qh = src + 128 + 32 * half;
      const int8_t* sc = reinterpret_cast<const int8_t*>(src + 192) + 8 * half;
      float* y = out + 128 * half;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        // (d * scale) * q, in this order, as the reference does.
        y[l] = d * sc[is] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
    }
    out += kQK;
  }
}

}  // namespace millipede::gguf_internal
