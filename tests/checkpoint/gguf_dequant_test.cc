// DequantizeGgml on hand-computed blocks and its argument checks; DequantizeTensor's reversed shape
// and its rounding to bf16 / fp16 (which must equal dtype.h's converters applied to the fp32
// result). The bit-exact comparison with ggml's reference dequantisers is gguf_oracle_test.py's.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "checkpoint/gguf.h"
#include "checkpoint/gguf_dequant.h"
#include "common/dtype.h"
#include "tests/checkpoint/test_util.h"

namespace millipede {
namespace {

using testing::ExpectErrorContains;

void PutHalf(std::vector<unsigned char>& b, size_t at, float v) {
  const uint16_t bits = FloatToFloat16(v).bits;
  std::memcpy(&b[at], &bits, 2);
}

// Random blocks of `type` whose f16 fields (at `half_offsets` in each block) hold values in
// [-1, 1].
std::vector<unsigned char> RandomBlocks(GgmlType type, int64_t blocks,
                                        std::initializer_list<size_t> half_offsets,
                                        uint32_t seed) {
  const size_t block_bytes = static_cast<size_t>(GgmlBlockBytes(type));
  std::vector<unsigned char> b(block_bytes * static_cast<size_t>(blocks));
  std::mt19937 rng(seed);
  for (unsigned char& c : b) c = static_cast<unsigned char>(rng());
  std::uniform_real_distribution<float> scale(-1.0f, 1.0f);
  for (int64_t i = 0; i < blocks; ++i) {
    for (size_t off : half_offsets) {
      PutHalf(b, static_cast<size_t>(i) * block_bytes + off, scale(rng));
    }
  }
  return b;
}

GgufTensorInfo MakeInfo(const std::string& name, GgmlType type, std::vector<int64_t> ne,
                        const std::vector<unsigned char>& bytes) {
  GgufTensorInfo t;
  t.name = name;
  t.type = type;
  t.ne = std::move(ne);
  t.num_elements = 1;
  for (int64_t n : t.ne) t.num_elements *= n;
  t.num_bytes = bytes.size();
  t.data = bytes.data();
  return t;
}

TEST(GgufDequantTest, Q4_0ByHand) {
  std::vector<unsigned char> b(18);
  PutHalf(b, 0, 0.5f);
  for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<unsigned char>(j | ((15 - j) << 4));
  std::vector<float> out(32);
  ASSERT_TRUE(DequantizeGgml(GgmlType::kQ4_0, b.data(), b.size(), 32, out.data()).ok());
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], (j - 8) * 0.5f) << j;            // low nibbles first
    EXPECT_EQ(out[j + 16], (15 - j - 8) * 0.5f) << j;  // then the high nibbles
  }
}

TEST(GgufDequantTest, Q5_1ByHand) {
  std::vector<unsigned char> b(24, 0);
  PutHalf(b, 0, 0.25f);             // d
  PutHalf(b, 2, -1.0f);             // m
  const uint32_t qh = 0x80000001u;  // fifth bit of value 0 and of value 31
  std::memcpy(&b[4], &qh, 4);
  b[8] = 0x3;    // value 0: 3 | 16 = 19; value 16: 0
  b[23] = 0xF0;  // value 15: 0; value 31: 15 | 16 = 31
  std::vector<float> out(32);
  ASSERT_TRUE(DequantizeGgml(GgmlType::kQ5_1, b.data(), b.size(), 32, out.data()).ok());
  EXPECT_EQ(out[0], 19 * 0.25f - 1.0f);
  EXPECT_EQ(out[16], -1.0f);
  EXPECT_EQ(out[15], -1.0f);
  EXPECT_EQ(out[31], 31 * 0.25f - 1.0f);
}

TEST(GgufDequantTest, Q8_0AndFloatsByHand) {
  std::vector<unsigned char> b(34);
  PutHalf(b, 0, -2.0f);
  for (int j = 0; j < 32; ++j) b[2 + j] = static_cast<unsigned char>(static_cast<int8_t>(j - 16));
  std::vector<float> out(32);
  ASSERT_TRUE(DequantizeGgml(GgmlType::kQ8_0, b.data(), b.size(), 32, out.data()).ok());
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[j], (j - 16) * -2.0f);

  const uint16_t bf16[2] = {0x3F80, 0xC040};  // 1.0, -3.0
  ASSERT_TRUE(DequantizeGgml(GgmlType::kBF16, bf16, 4, 2, out.data()).ok());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -3.0f);
  const uint16_t f16[2] = {0x3C00, 0x0001};  // 1.0, the smallest subnormal
  ASSERT_TRUE(DequantizeGgml(GgmlType::kF16, f16, 4, 2, out.data()).ok());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 5.9604644775390625e-8f);
}

TEST(GgufDequantTest, Q4_KScalesByHand) {
  // d = 1, dmin = 0.5; sub-block 5's 6-bit scale 0b10'0011 = 35 and min 0b01'0100 = 20 are split
  // between byte 1 (top bits of the scale), byte 5 (top bits of the min) and byte 9.
  std::vector<unsigned char> b(144, 0);
  PutHalf(b, 0, 1.0f);
  PutHalf(b, 2, 0.5f);
  unsigned char* s = &b[4];
  s[1] = 0b10 << 6;
  s[5] = 0b01 << 6;
  s[9] = 0x3 | (0x4 << 4);
  // Sub-block 5 is the high nibbles of qs[64..96).
  for (int l = 0; l < 32; ++l) b[16 + 64 + l] = static_cast<unsigned char>((l % 16) << 4);
  std::vector<float> out(256);
  ASSERT_TRUE(DequantizeGgml(GgmlType::kQ4_K, b.data(), b.size(), 256, out.data()).ok());
  for (int l = 0; l < 32; ++l) EXPECT_EQ(out[160 + l], 35.0f * (l % 16) - 10.0f) << l;
  // Sub-block 1 takes its scale from byte 1's low 6 bits (0) and min from byte 5's (0).
  EXPECT_EQ(out[32], 0.0f);
}

TEST(GgufDequantTest, ArgumentChecks) {
  std::vector<unsigned char> b(34 * 2);
  std::vector<float> out(64);
  Status s = DequantizeGgml(GgmlType::kQ8_0, b.data(), b.size(), 48, out.data());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  ExpectErrorContains(s, {"48", "Q8_0", "whole number of 32-element blocks"});
  s = DequantizeGgml(GgmlType::kQ8_0, b.data(), b.size() - 1, 64, out.data());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  ExpectErrorContains(s, {"need 68 bytes", "has 67"});
  s = DequantizeGgml(GgmlType::kQ8_0, b.data(), b.size(), -32, out.data());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  s = DequantizeGgml(static_cast<GgmlType>(4), b.data(), b.size(), 32, out.data());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  ExpectErrorContains(s, {"unknown ggml type 4"});
  EXPECT_TRUE(DequantizeGgml(GgmlType::kQ8_0, nullptr, 0, 0, nullptr).ok());

  GgufTensorInfo t = MakeInfo("blk.0.w", GgmlType::kQ8_0, {32, 2}, b);
  StatusOr<HostTensor> r = DequantizeTensor(t, DType::kI32);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  ExpectErrorContains(r.status(), {"\"blk.0.w\"", "I32"});
  t.num_bytes = 60;
  r = DequantizeTensor(t, DType::kF32);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  ExpectErrorContains(r.status(), {"\"blk.0.w\"", "68 bytes"});
  t.num_bytes = b.size();
  t.ne = {32, 1, 1, 1, 2};
  r = DequantizeTensor(t, DType::kF32);
  ExpectErrorContains(r.status(), {"\"blk.0.w\"", "5 dimensions"});
}

TEST(GgufDequantTest, TensorShapeIsReversed) {
  // ne = [64, 3, 2]: rows of 64 contiguous values, 3 of them, 2 times: shape [2, 3, 64].
  const std::vector<unsigned char> bytes = RandomBlocks(GgmlType::kQ8_0, 2 * 3 * 2, {0}, 7);
  const GgufTensorInfo t = MakeInfo("w", GgmlType::kQ8_0, {64, 3, 2}, bytes);
  StatusOr<HostTensor> out = DequantizeTensor(t, DType::kF32);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->dtype(), DType::kF32);
  EXPECT_EQ(out->shape(), (Shape{2, 3, 64}));
  std::vector<float> flat(2 * 3 * 64);
  ASSERT_TRUE(DequantizeGgml(t.type, t.data, t.num_bytes, t.num_elements, flat.data()).ok());
  EXPECT_EQ(std::memcmp(out->data<float>(), flat.data(), flat.size() * 4), 0);

  const std::vector<unsigned char> one_block(bytes.begin(), bytes.begin() + 34 * 2);
  StatusOr<HostTensor> one =
      DequantizeTensor(MakeInfo("v", GgmlType::kQ8_0, {64}, one_block), DType::kF32);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(one->shape(), (Shape{64}));
}

// bf16 and fp16 outputs are the fp32 result rounded to nearest even by dtype.h's converters, for
// every format and across the converter's internal chunks (the tensors exceed 16384 values).
TEST(GgufDequantTest, SixteenBitOutputsRoundTheFp32Result) {
  struct Case {
    GgmlType type;
    std::initializer_list<size_t> halves;
  };
  const Case cases[] = {
      {GgmlType::kQ4_0, {0}},     {GgmlType::kQ4_1, {0, 2}},   {GgmlType::kQ5_0, {0}},
      {GgmlType::kQ5_1, {0, 2}},  {GgmlType::kQ8_0, {0}},      {GgmlType::kQ2_K, {80, 82}},
      {GgmlType::kQ3_K, {108}},   {GgmlType::kQ4_K, {0, 2}},   {GgmlType::kQ5_K, {0, 2}},
      {GgmlType::kQ6_K, {208}},
  };
  uint32_t seed = 1;
  for (const Case& c : cases) {
    const int64_t row = 512, rows = 40;  // 20480 values
    const int64_t blocks = row * rows / GgmlBlockElements(c.type);
    const std::vector<unsigned char> bytes = RandomBlocks(c.type, blocks, c.halves, seed++);
    const GgufTensorInfo t = MakeInfo(GgmlTypeName(c.type), c.type, {row, rows}, bytes);
    StatusOr<HostTensor> f32 = DequantizeTensor(t, DType::kF32);
    StatusOr<HostTensor> bf16 = DequantizeTensor(t, DType::kBF16);
    StatusOr<HostTensor> f16 = DequantizeTensor(t, DType::kF16);
    ASSERT_TRUE(f32.ok() && bf16.ok() && f16.ok()) << GgmlTypeName(c.type);
    EXPECT_EQ(bf16->shape(), (Shape{rows, row}));
    EXPECT_EQ(f16->dtype(), DType::kF16);
    int64_t bf16_rounded = 0, mismatches = 0;
    for (int64_t i = 0; i < t.num_elements; ++i) {
      const float x = f32->data<float>()[i];
      const uint16_t want_bf16 = FloatToBFloat16(x).bits;
      const uint16_t want_f16 = FloatToFloat16(x).bits;
      if (bf16->data<BFloat16>()[i].bits != want_bf16 || f16->data<Float16>()[i].bits != want_f16) {
        ++mismatches;
      }
      if (BFloat16ToFloat(BFloat16{want_bf16}) != x) ++bf16_rounded;
    }
    EXPECT_EQ(mismatches, 0) << GgmlTypeName(c.type);
    // The data is rich enough that rounding to bf16 really happened.
    EXPECT_GT(bf16_rounded, t.num_elements / 10) << GgmlTypeName(c.type);
  }
}

TEST(GgufDequantTest, FloatTensorsToSixteenBits) {
  // F32 values on and between the bf16 / fp16 grids, ties included.
  const std::vector<float> values = {1.0f, 1.00390625f /* bf16 tie */, 1.0f + 1.0f / 1024 / 2,
                                     -65504.0f, 65520.0f /* fp16 overflow */, 1e-8f, -0.0f,
                                     3.14159265f};
  std::vector<unsigned char> bytes(values.size() * 4);
  std::memcpy(bytes.data(), values.data(), bytes.size());
  const GgufTensorInfo t =
      MakeInfo("f", GgmlType::kF32, {static_cast<int64_t>(values.size())}, bytes);
  StatusOr<HostTensor> bf16 = DequantizeTensor(t, DType::kBF16);
  StatusOr<HostTensor> f16 = DequantizeTensor(t, DType::kF16);
  ASSERT_TRUE(bf16.ok() && f16.ok());
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(bf16->data<BFloat16>()[i].bits, FloatToBFloat16(values[i]).bits) << i;
    EXPECT_EQ(f16->data<Float16>()[i].bits, FloatToFloat16(values[i]).bits) << i;
  }
  EXPECT_EQ(bf16->data<BFloat16>()[1].bits, 0x3F80);  // the tie went to even
  EXPECT_EQ(f16->data<Float16>()[4].bits, 0x7C00);    // to infinity
}

}  // namespace
}  // namespace millipede
