#include "checkpoint/gguf_dequant.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "checkpoint/gguf_blocks.h"
#include "common/checked_math.h"
#include "common/dtype.h"

namespace millipede {
namespace gguf_internal {

// The 32-element formats: an f16 scale d (and for the _1 types an f16 min m), then the values.
// Byte j of qs holds value j in its low nibble and value j + 16 in its high nibble; the 5-bit
// types keep the fifth bit of value j in bit j of the little-endian u32 qh.

void DequantizeQ4_0(const unsigned char* src, int64_t blocks, float* out) {
  for (int64_t b = 0; b < blocks; ++b, src += 18, out += 32) {
    const float d = LoadHalf(src);
    const unsigned char* qs = src + 2;
    for (int j = 0; j < 16; ++j) {
      out[j] = ((qs[j] & 0xF) - 8) * d;
      out[j + 16] = ((qs[j] >> 4) - 8) * d;
    }
  }
}

void DequantizeQ4_1(const unsigned char* src, int64_t blocks, float* out) {
  for (int64_t b = 0; b < blocks; ++b, src += 20, out += 32) {
    const float d = LoadHalf(src);
    const float m = LoadHalf(src + 2);
    const unsigned char* qs = src + 4;
    for (int j = 0; j < 16; ++j) {
      out[j] = (qs[j] & 0xF) * d + m;
      out[j + 16] = (qs[j] >> 4) * d + m;
    }
  }
}

void DequantizeQ5_0(const unsigned char* src, int64_t blocks, float* out) {
  for (int64_t b = 0; b < blocks; ++b, src += 22, out += 32) {
    const float d = LoadHalf(src);
    uint32_t qh;
    std::memcpy(&qh, src + 2, 4);
    const unsigned char* qs = src + 6;
    for (int j = 0; j < 16; ++j) {
      const int hi0 = static_cast<int>((qh >> j) & 1) << 4;
      const int hi1 = static_cast<int>((qh >> (j + 16)) & 1) << 4;
      out[j] = (((qs[j] & 0xF) | hi0) - 16) * d;
      out[j + 16] = (((qs[j] >> 4) | hi1) - 16) * d;
    }
  }
}

void DequantizeQ5_1(const unsigned char* src, int64_t blocks, float* out) {
  for (int64_t b = 0; b < blocks; ++b, src += 24, out += 32) {
    const float d = LoadHalf(src);
    const float m = LoadHalf(src + 2);
    uint32_t qh;
    std::memcpy(&qh, src + 4, 4);
    const unsigned char* qs = src + 8;
    for (int j = 0; j < 16; ++j) {
      const int hi0 = static_cast<int>((qh >> j) & 1) << 4;
      const int hi1 = static_cast<int>((qh >> (j + 16)) & 1) << 4;
      out[j] = ((qs[j] & 0xF) | hi0) * d + m;
      out[j + 16] = ((qs[j] >> 4) | hi1) * d + m;
    }
  }
}

void DequantizeQ8_0(const unsigned char* src, int64_t blocks, float* out) {
  for (int64_t b = 0; b < blocks; ++b, src += 34, out += 32) {
    const float d = LoadHalf(src);
    const int8_t* qs = reinterpret_cast<const int8_t*>(src + 2);
    for (int j = 0; j < 32; ++j) out[j] = qs[j] * d;
  }
}

}  // namespace gguf_internal

namespace {

using namespace gguf_internal;  // NOLINT(build/namespaces)

void Decode(GgmlType type, const unsigned char* src, int64_t blocks, float* out) {
  switch (type) {
    case GgmlType::kF32: std::memcpy(out, src, static_cast<size_t>(blocks) * 4); break;
    case GgmlType::kF16:
      for (int64_t i = 0; i < blocks; ++i) out[i] = LoadHalf(src + 2 * i);
      break;
    case GgmlType::kBF16:
      for (int64_t i = 0; i < blocks; ++i) {
        uint16_t bits;
        std::memcpy(&bits, src + 2 * i, 2);
        out[i] = BFloat16ToFloat(BFloat16{bits});
      }
      break;
    case GgmlType::kQ4_0: DequantizeQ4_0(src, blocks, out); break;
    case GgmlType::kQ4_1: DequantizeQ4_1(src, blocks, out); break;
    case GgmlType::kQ5_0: DequantizeQ5_0(src, blocks, out); break;
    case GgmlType::kQ5_1: DequantizeQ5_1(src, blocks, out); break;
    case GgmlType::kQ8_0: DequantizeQ8_0(src, blocks, out); break;
    case GgmlType::kQ2_K: DequantizeQ2_K(src, blocks, out); break;
    case GgmlType::kQ3_K: DequantizeQ3_K(src, blocks, out); break;
    case GgmlType::kQ4_K: DequantizeQ4_K(src, blocks, out); break;
    case GgmlType::kQ5_K: DequantizeQ5_K(src, blocks, out); break;
    case GgmlType::kQ6_K: DequantizeQ6_K(src, blocks, out); break;
  }
}

// Checks that `count` values of `type` are whole blocks that `src_bytes` holds; gives the number
// of blocks.
Status CheckBlocks(GgmlType type, size_t src_bytes, int64_t count, int64_t* blocks) {
  const int64_t block_elements = GgmlBlockElements(type);
  MP_REQUIRE(block_elements > 0, "unknown ggml type ", static_cast<uint32_t>(type));
  MP_REQUIRE(count >= 0 && count % block_elements == 0, count, " ", GgmlTypeName(type),
             " values are not a whole number of ", block_elements, "-element blocks");
  *blocks = count / block_elements;
  uint64_t need = 0;
  MP_REQUIRE(CheckedMul(static_cast<uint64_t>(*blocks), static_cast<uint64_t>(GgmlBlockBytes(type)),
                        &need) && need <= src_bytes,
             count, " ", GgmlTypeName(type), " values need ", need, " bytes, but the source has ",
             src_bytes);
  return OkStatus();
}

}  // namespace

Status DequantizeGgml(GgmlType type, const void* src, size_t src_bytes, int64_t count,
                      float* out) {
  int64_t blocks = 0;
  MP_RETURN_IF_ERROR(CheckBlocks(type, src_bytes, count, &blocks).WithContext("DequantizeGgml"));
  if (blocks > 0) Decode(type, static_cast<const unsigned char*>(src), blocks, out);
  return OkStatus();
}

StatusOr<HostTensor> DequantizeTensor(const GgufTensorInfo& tensor, DType dtype) {
  const std::string what = "DequantizeTensor: tensor \"" + tensor.name + "\"";
  MP_REQUIRE(dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16, what,
             ": cannot dequantize to ", DTypeName(dtype), " (only F32, BF16 and F16)");
  MP_REQUIRE(!tensor.ne.empty() && tensor.ne.size() <= 4, what, ": ", tensor.ne.size(),
             " dimensions; 1 to 4 are supported");
  std::vector<int64_t> dims(tensor.ne.rbegin(), tensor.ne.rend());
  MP_ASSIGN_OR_RETURN(Shape shape, Shape::FromVector(dims));
  // Overflow-checks the product of the dimensions (the info may not come from GgufFile).
  MP_RETURN_IF_ERROR(CheckedNumBytes(shape, dtype).status().WithContext(what));
  const int64_t count = shape.NumElements();
  int64_t blocks = 0;
  MP_RETURN_IF_ERROR(CheckBlocks(tensor.type, tensor.num_bytes, count, &blocks).WithContext(what));
  MP_REQUIRE(tensor.data != nullptr, what, ": no data");

  HostTensor out(dtype, shape);
  if (dtype == DType::kF32) {
    Decode(tensor.type, tensor.data, blocks, out.data<float>());
    return out;
  }
  // A slice of blocks at a time through a small fp32 buffer, each value then rounded to the
  // 16-bit type.
  const int64_t block_elements = GgmlBlockElements(tensor.type);
  const int64_t block_bytes = GgmlBlockBytes(tensor.type);
  const int64_t chunk_blocks = std::max<int64_t>(1, 16384 / block_elements);
  std::vector<float> buffer(static_cast<size_t>(chunk_blocks * block_elements));
  void* dst = out.view().data;
  for (int64_t b = 0; b < blocks; b += chunk_blocks) {
    const int64_t n = std::min(chunk_blocks, blocks - b);
    Decode(tensor.type, tensor.data + b * block_bytes, n, buffer.data());
    const size_t first = static_cast<size_t>(b * block_elements);
    for (size_t i = 0; i < static_cast<size_t>(n * block_elements); ++i) {
      StoreFromFloat(dst, dtype, first + i, buffer[i]);
    }
  }
  return out;
}

}  // namespace millipede
