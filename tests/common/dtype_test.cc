#include "common/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace millipede {
namespace {

// Independent oracle: the nearest representable value by exhaustive search over the 65536
// encodings, ties to the even encoding. Slow but obviously right.
template <typename Decode>
uint16_t NearestEncoding(float x, Decode decode) {
  uint16_t best = 0;
  double best_err = std::numeric_limits<double>::infinity();
  for (uint32_t b = 0; b < 65536; ++b) {
    float v = decode(static_cast<uint16_t>(b));
    if (std::isnan(v)) continue;
    if (v == 0.0f && std::signbit(v) != std::signbit(x)) continue;  // keep the sign of zero
    double err = std::fabs(static_cast<double>(v) - static_cast<double>(x));
    if (err < best_err || (err == best_err && (b & 1u) == 0 && (best & 1u) == 1)) {
      best_err = err;
      best = static_cast<uint16_t>(b);
    }
  }
  return best;
}

float DecodeBF16(uint16_t b) { return BFloat16ToFloat(BFloat16{b}); }
float DecodeF16(uint16_t b) { return Float16ToFloat(Float16{b}); }

TEST(DTypeTest, SizesAndNames) {
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kF32), 4u);
  EXPECT_EQ(DTypeSize(DType::kI64), 8u);
  EXPECT_EQ(*ParseDType("BF16"), DType::kBF16);
  EXPECT_FALSE(ParseDType("bf16").ok());  // safetensors names are upper case
  EXPECT_EQ(*ParseDType("F8_E4M3"), DType::kF8E4M3);
  EXPECT_EQ(DTypeSize(DType::kF8E4M3), 1u);
  EXPECT_FALSE(ParseDType("F8_E5M2").ok());
  EXPECT_EQ(*ParseFloatDTypeName("bf16"), DType::kBF16);
  EXPECT_EQ(*ParseFloatDTypeName("fp32"), DType::kF32);
  EXPECT_FALSE(ParseFloatDTypeName("int4").ok());
  EXPECT_FALSE(ParseFloatDTypeName("fp8").ok());  // not a type of weights or activations
  EXPECT_EQ(*ParseKvDTypeName("fp8"), DType::kF8E4M3);
  EXPECT_EQ(*ParseKvDTypeName("bf16"), DType::kBF16);
  EXPECT_FALSE(ParseKvDTypeName("fp4").ok());
  EXPECT_TRUE(IsKvDType(DType::kF8E4M3) && !IsFloatDType(DType::kF8E4M3));
}

TEST(DTypeTest, BFloat16GoldenValues) {
  EXPECT_EQ(FloatToBFloat16(1.0f).bits, 0x3f80);
  EXPECT_EQ(FloatToBFloat16(-2.0f).bits, 0xc000);
  // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: ties to even -> 1.
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8)).bits, 0x3f80);
  // 1 + 3*2^-8 is halfway between 1+2^-7 (odd) and 1+2^-6 (even) -> rounds up.
  EXPECT_EQ(FloatToBFloat16(1.0f + 3 * std::ldexp(1.0f, -8)).bits, 0x3f82);
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::infinity()).bits, 0x7f80);
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(std::nanf("")))));
  // The largest float rounds to infinity in bf16.
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::max()).bits, 0x7f80);
}

TEST(DTypeTest, Float16GoldenValues) {
  EXPECT_EQ(FloatToFloat16(1.0f).bits, 0x3c00);
  EXPECT_EQ(FloatToFloat16(65504.0f).bits, 0x7bff);
  EXPECT_EQ(FloatToFloat16(65520.0f).bits, 0x7c00);  // halfway to 2^16: ties to even = Inf
  EXPECT_EQ(FloatToFloat16(65519.0f).bits, 0x7bff);
  EXPECT_EQ(FloatToFloat16(std::ldexp(1.0f, -24)).bits, 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToFloat16(std::ldexp(1.0f, -25)).bits, 0x0000);  // tie -> even (zero)
  EXPECT_EQ(FloatToFloat16(std::ldexp(3.0f, -25)).bits, 0x0002);  // tie 1.5 ulp -> 2
  EXPECT_EQ(FloatToFloat16(-0.0f).bits, 0x8000);
  EXPECT_FLOAT_EQ(Float16ToFloat(Float16{0x3555}), 0.333251953125f);
  EXPECT_TRUE(std::isnan(Float16ToFloat(FloatToFloat16(std::nanf("")))));
}

TEST(DTypeTest, RoundTripEveryEncoding) {
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = DecodeBF16(static_cast<uint16_t>(b));
    if (!std::isnan(f)) {
      EXPECT_EQ(FloatToBFloat16(f).bits, b);
    }
    float h = DecodeF16(static_cast<uint16_t>(b));
    if (!std::isnan(h)) {
      EXPECT_EQ(FloatToFloat16(h).bits, b);
    }
  }
}

TEST(DTypeTest, RandomValuesMatchExhaustiveNearest) {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> exponent(-27.0f, 17.0f);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  for (int i = 0; i < 300; ++i) {
    float x = std::ldexp(mant(rng), static_cast<int>(exponent(rng))) * (i % 2 ? -1.0f : 1.0f);
    if (std::fabs(x) < 65504.0f) {
      EXPECT_EQ(FloatToFloat16(x).bits, NearestEncoding(x, DecodeF16)) << x;
    }
    EXPECT_EQ(FloatToBFloat16(x).bits, NearestEncoding(x, DecodeBF16)) << x;
  }
}

// E4M3's oracle: the nearest of the 254 finite encodings, ties to the even encoding; beyond the
// largest (448) the result saturates to it, as the KV cache's conversion does.
uint8_t NearestE4M3(float x) {
  if (std::fabs(x) >= 448.0f) return x < 0 ? 0xfe : 0x7e;
  uint8_t best = 0;
  double best_err = std::numeric_limits<double>::infinity();
  for (uint32_t b = 0; b < 256; ++b) {
    const float v = E4M3BitsToFloat(static_cast<uint8_t>(b));
    if (std::isnan(v)) continue;
    if (v == 0.0f && std::signbit(v) != std::signbit(x)) continue;
    const double err = std::fabs(static_cast<double>(v) - static_cast<double>(x));
    if (err < best_err || (err == best_err && (b & 1u) == 0 && (best & 1u) == 1)) {
      best_err = err;
      best = static_cast<uint8_t>(b);
    }
  }
  return best;
}

TEST(DTypeTest, Float8E4M3GoldenValues) {
  EXPECT_EQ(FloatToE4M3Bits(1.0f), 0x38);
  EXPECT_EQ(FloatToE4M3Bits(-2.0f), 0xc0);
  EXPECT_EQ(FloatToE4M3Bits(448.0f), 0x7e);
  EXPECT_EQ(FloatToE4M3Bits(464.0f), 0x7e);  // would round to 480: saturates, never NaN
  EXPECT_EQ(FloatToE4M3Bits(1e30f), 0x7e);
  EXPECT_EQ(FloatToE4M3Bits(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_EQ(FloatToE4M3Bits(std::ldexp(1.0f, -9)), 0x01);    // smallest subnormal
  EXPECT_EQ(FloatToE4M3Bits(std::ldexp(1.0f, -10)), 0x00);   // tie -> even (zero)
  EXPECT_EQ(FloatToE4M3Bits(std::ldexp(3.0f, -10)), 0x02);   // tie 1.5 ulp -> 2
  EXPECT_EQ(FloatToE4M3Bits(std::ldexp(15.0f, -10)), 0x08);  // rounds up to 2^-6, a normal
  EXPECT_EQ(FloatToE4M3Bits(1.0f + 1.0f / 16), 0x38);        // tie between 1 and 1.125 -> 1
  EXPECT_EQ(FloatToE4M3Bits(1.0f + 3.0f / 16), 0x3a);        // tie -> 1.25 (even)
  EXPECT_EQ(FloatToE4M3Bits(-0.0f), 0x80);
  EXPECT_EQ(FloatToE4M3Bits(std::nanf("")) & 0x7f, 0x7f);
  EXPECT_TRUE(std::isnan(E4M3BitsToFloat(0x7f)) && std::isnan(E4M3BitsToFloat(0xff)));
  EXPECT_EQ(E4M3BitsToFloat(0x7e), 448.0f);
  EXPECT_EQ(E4M3BitsToFloat(0x01), std::ldexp(1.0f, -9));
}

TEST(DTypeTest, Float8E4M3RoundTripsAndMatchesExhaustiveNearest) {
  for (uint32_t b = 0; b < 256; ++b) {
    const float f = E4M3BitsToFloat(static_cast<uint8_t>(b));
    if (!std::isnan(f)) EXPECT_EQ(FloatToE4M3Bits(f), b) << b;
  }
  std::mt19937 rng(4321);
  std::uniform_real_distribution<float> exponent(-13.0f, 11.0f);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  for (int i = 0; i < 20000; ++i) {
    const float x = std::ldexp(mant(rng), static_cast<int>(exponent(rng))) * (i % 2 ? -1.0f : 1.0f);
    EXPECT_EQ(FloatToE4M3Bits(x), NearestE4M3(x)) << x;
  }
  // Every midpoint between neighbouring encodings, and a float just either side of it.
  for (uint32_t b = 0; b < 0x7e; ++b) {
    const float lo = E4M3BitsToFloat(static_cast<uint8_t>(b));
    const float hi = E4M3BitsToFloat(static_cast<uint8_t>(b + 1));
    const float mid = (lo + hi) / 2;  // exact in float
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1000.0f)})
      for (float sign : {1.0f, -1.0f}) EXPECT_EQ(FloatToE4M3Bits(sign * x), NearestE4M3(sign * x));
  }
}

TEST(DTypeTest, ConvertFloats) {
  float src[3] = {1.5f, -0.25f, 3.0f};
  BFloat16 mid[3];
  float back[3];
  ASSERT_TRUE(ConvertFloats(src, DType::kF32, mid, DType::kBF16, 3).ok());
  ASSERT_TRUE(ConvertFloats(mid, DType::kBF16, back, DType::kF32, 3).ok());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(back[i], src[i]);
  uint8_t fp8[3];
  ASSERT_TRUE(ConvertFloats(src, DType::kF32, fp8, DType::kF8E4M3, 3).ok());
  ASSERT_TRUE(ConvertFloats(fp8, DType::kF8E4M3, back, DType::kF32, 3).ok());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(back[i], src[i]);  // all three are E4M3 values
  int32_t ints[3];
  EXPECT_FALSE(ConvertFloats(src, DType::kF32, ints, DType::kI32, 3).ok());
}

}  // namespace
}  // namespace millipede
