#include "kernels/layer/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "tests/kernels/kernel_test_util.h"

namespace millipede {
namespace {

using testing::AllClose;
using testing::CopyF32;
using testing::CView;
using testing::RandomTensor;
using testing::TensorOf;
using testing::ToFloats;

constexpr double kPi = std::numbers::pi;

std::vector<float> InvFreq(int64_t head_dim, double theta, const RopeScaling& scaling = {},
                           int64_t max_pos = 0, int64_t seq_len = 0) {
  StatusOr<std::vector<float>> r = RopeInvFreq(head_dim, theta, scaling, max_pos, seq_len);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : std::vector<float>();
}

HostTensor Positions(const std::vector<int64_t>& p) {
  HostTensor t(DType::kI64, {static_cast<int64_t>(p.size())});
  for (size_t i = 0; i < p.size(); ++i) t.data<int64_t>()[i] = p[i];
  return t;
}

Status Rope(HostTensor& x, const std::vector<int64_t>& positions, const std::vector<float>& inv) {
  HostTensor pos = Positions(positions);
  HostTensor inv_t = TensorOf(DType::kF32, {static_cast<int64_t>(inv.size())}, inv);
  return RopeRef({x.view(), CView(pos), CView(inv_t)});
}

TEST(RopeTest, DefaultInvFreqByHand) {
  // head_dim 4, theta 100: 1/100^0 = 1, 1/100^(2/4) = 0.1.
  EXPECT_TRUE(AllClose(InvFreq(4, 100.0), {1.0f, 0.1f}, 1e-7));
  // Llama 2 (theta 1e4, head_dim 128): i = 32 gives 1e4^(-1/2) = 0.01.
  const std::vector<float> llama2 = InvFreq(128, 1e4);
  ASSERT_EQ(llama2.size(), 64u);
  EXPECT_FLOAT_EQ(llama2[0], 1.0f);
  EXPECT_FLOAT_EQ(llama2[32], 0.01f);
  for (int i = 0; i < 64; ++i)
    EXPECT_NEAR(llama2[i], std::pow(1e4, -2.0 * i / 128), 2e-7 * std::pow(1e4, -2.0 * i / 128));
}

TEST(RopeTest, LinearDividesByFactor) {
  RopeScaling linear{RopeScalingType::kLinear, 4.0};
  const std::vector<float> base = InvFreq(64, 5e5), scaled = InvFreq(64, 5e5, linear);
  for (size_t i = 0; i < base.size(); ++i) EXPECT_EQ(scaled[i], base[i] / 4.0f);
}

TEST(RopeTest, DynamicNtkRescalesBaseOnlyPastTrainedLength) {
  RopeScaling dynamic{RopeScalingType::kDynamic, 2.0};
  // Up to max_position_embeddings the base is unchanged.
  EXPECT_EQ(InvFreq(4, 100.0, dynamic, 100, 0), InvFreq(4, 100.0));
  EXPECT_EQ(InvFreq(4, 100.0, dynamic, 100, 100), InvFreq(4, 100.0));
  // seq_len 200: base = 100 * (2 * 200 / 100 - (2 - 1))^(4 / 2) = 900, inv_freq = [1, 1/30].
  EXPECT_TRUE(AllClose(InvFreq(4, 100.0, dynamic, 100, 200), {1.0f, 1.0f / 30.0f}, 2e-7));
  // head_dim 8 (exponent 8/6): compare with the formula in double.
  const double base = 1e4 * std::pow(2.0 * 300 / 100 - 1.0, 8.0 / 6.0);
  const std::vector<float> got = InvFreq(8, 1e4, dynamic, 100, 300);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(got[i], std::pow(base, -i / 4.0), 3e-7 * got[i]);
}

// HF's llama3 rule, written from the formula in double.
double Llama3Expected(double inv, double factor, double low, double high, double old_len) {
  const double wavelen = 2 * kPi / inv;
  if (wavelen < old_len / high) return inv;
  if (wavelen > old_len / low) return inv / factor;
  const double smooth = (old_len / wavelen - low) / (high - low);
  return (1 - smooth) * inv / factor + smooth * inv;
}

TEST(RopeTest, Llama3SmallCaseCoversAllThreeBands) {
  // head_dim 8, theta 64: inv_freq = 1, 64^-1/4, 1/8, 64^-3/4, wavelengths 6.28, 17.8, 50.3, 142.
  // original_max 32, low 1, high 4: keep below 8, divide above 32, interpolate between.
  RopeScaling llama3{RopeScalingType::kLlama3, 8.0, 1.0, 4.0, 32};
  const std::vector<float> got = InvFreq(8, 64.0, llama3);
  const double inv1 = std::pow(64.0, -0.25);
  const double smooth1 = (32.0 / (2 * kPi / inv1) - 1.0) / 3.0;  // ~0.267
  EXPECT_TRUE(AllClose(got,
                       {1.0f, static_cast<float>((1 - smooth1) * inv1 / 8 + smooth1 * inv1),
                        0.125f / 8, static_cast<float>(std::pow(64.0, -0.75) / 8)},
                       1e-6));
}

TEST(RopeTest, Llama31BandsAndValues) {
  // Llama 3.1: theta 5e5, head_dim 128, factor 8, low 1, high 4, original 8192. Wavelength
  // 2*pi*5e5^(i/64) crosses 2048 at i = 28.2 and 8192 at i = 34.98 (by hand: ln(2048 / 2pi) /
  // ln(5e5) * 64 and ln(8192 / 2pi) / ln(5e5) * 64), so 0..28 keep, 29..34 blend, 35..63 / 8.
  RopeScaling llama3{RopeScalingType::kLlama3, 8.0, 1.0, 4.0, 8192};
  const std::vector<float> base = InvFreq(128, 5e5);
  const std::vector<float> got = InvFreq(128, 5e5, llama3);
  ASSERT_EQ(got.size(), 64u);
  for (int i = 0; i < 64; ++i) {
    EXPECT_NEAR(got[i], Llama3Expected(base[i], 8, 1, 4, 8192), 1e-6 * got[i]) << i;
    if (i <= 28) {
      EXPECT_EQ(got[i], base[i]) << i;
    }
    if (i >= 35) {
      EXPECT_EQ(got[i], base[i] / 8.0f) << i;
    }
    if (i >= 29 && i <= 34) {
      EXPECT_LT(got[i], base[i]) << i;
      EXPECT_GT(got[i], base[i] / 8.0f) << i;
    }
  }
}

TEST(RopeTest, Llama3IsContinuousAtBandEdges) {
  // The i = 0 wavelength is 2*pi. Put each band edge just below and just above it.
  const double edge = 8.0 / (2 * kPi);  // high_freq_factor making old_len / high == 2*pi
  for (double rel : {1 - 1e-6, 1 + 1e-6}) {
    RopeScaling s{RopeScalingType::kLlama3, 8.0, 1.0, edge * rel, 8};
    EXPECT_NEAR(InvFreq(4, 100.0, s)[0], 1.0, 1e-5) << rel;
  }
  const double low_edge = 64.0 / (2 * kPi);  // low_freq_factor making old_len / low == 2*pi
  for (double rel : {1 - 1e-6, 1 + 1e-6}) {
    RopeScaling s{RopeScalingType::kLlama3, 8.0, low_edge * rel, 20.0, 64};
    EXPECT_NEAR(InvFreq(4, 100.0, s)[0], 1.0 / 8, 1e-5) << rel;
  }
}

TEST(RopeTest, RotatesHalvesByHand) {
  // head_dim 4, inv_freq (1, 0.1), position 1: pair (x0, x2) turns by 1 rad, (x1, x3) by 0.1.
  HostTensor x = TensorOf(DType::kF32, {1, 1, 4}, {1, 2, 3, 4});
  ASSERT_TRUE(Rope(x, {1}, {1.0f, 0.1f}).ok());
  const double c1 = std::cos(1.0), s1 = std::sin(1.0);
  const double c2 = std::cos(0.1f), s2 = std::sin(0.1f);
  EXPECT_TRUE(AllClose(ToFloats(x),
                       {static_cast<float>(1 * c1 - 3 * s1), static_cast<float>(2 * c2 - 4 * s2),
                        static_cast<float>(3 * c1 + 1 * s1), static_cast<float>(4 * c2 + 2 * s2)},
                       1e-6));
}

TEST(RopeTest, MatchesFormulaForEveryRowAndHead) {
  const int64_t n = 6, heads = 3, d = 16;
  HostTensor x = RandomTensor(DType::kF32, {n, heads, d}, 1);
  HostTensor original = CopyF32(x);
  const std::vector<float> inv = InvFreq(d, 1e4);
  const std::vector<int64_t> positions = {0, 7, 8, 1000, 123456, 3};
  ASSERT_TRUE(Rope(x, positions, inv).ok());
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < d / 2; ++i) {
        const float* in = original.data<float>() + (t * heads + h) * d;
        const float* out = x.data<float>() + (t * heads + h) * d;
        const double angle = static_cast<float>(positions[t]) * inv[i];  // fp32 product, as HF
        EXPECT_NEAR(out[i], in[i] * std::cos(angle) - in[i + d / 2] * std::sin(angle), 1e-6);
        EXPECT_NEAR(out[i + d / 2], in[i + d / 2] * std::cos(angle) + in[i] * std::sin(angle),
                    1e-6);
      }
  // Position 0 is the identity.
  for (int64_t c = 0; c < heads * d; ++c) EXPECT_EQ(x.data<float>()[c], original.data<float>()[c]);
}

TEST(RopeTest, PreservesNormOfEveryPair) {
  const int64_t n = 20, heads = 2, d = 64;
  HostTensor x = RandomTensor(DType::kF32, {n, heads, d}, 2, -2.0f, 2.0f);
  HostTensor original = CopyF32(x);
  std::vector<int64_t> positions(n);
  for (int64_t t = 0; t < n; ++t) positions[t] = t * 997;
  ASSERT_TRUE(Rope(x, positions, InvFreq(d, 5e5)).ok());
  for (int64_t r = 0; r < n * heads; ++r)
    for (int64_t i = 0; i < d / 2; ++i) {
      const float* a = original.data<float>() + r * d;
      const float* b = x.data<float>() + r * d;
      const double before = std::hypot(a[i], a[i + d / 2]);
      EXPECT_NEAR(std::hypot(b[i], b[i + d / 2]), before, 1e-6 * (1 + before));
    }
}

double Dot(const float* a, const float* b, int64_t d) {
  double s = 0;
  for (int64_t i = 0; i < d; ++i) s += double(a[i]) * b[i];
  return s;
}

TEST(RopeTest, ScoresDependOnlyOnPositionDifference) {
  const int64_t d = 32;
  const std::vector<float> inv = InvFreq(d, 1e4);
  HostTensor q = RandomTensor(DType::kF32, {1, 1, d}, 3),
             k = RandomTensor(DType::kF32, {1, 1, d}, 4);
  for (int64_t delta : {0, 1, 5, 17}) {
    std::vector<double> scores;
    for (int64_t base : {20, 37, 301}) {
      HostTensor qr = CopyF32(q), kr = CopyF32(k);
      ASSERT_TRUE(Rope(qr, {base + delta}, inv).ok());
      ASSERT_TRUE(Rope(kr, {base}, inv).ok());
      scores.push_back(Dot(qr.data<float>(), kr.data<float>(), d));
    }
    // fp32 angles at positions ~300 carry ~300 * 2^-24 rad of rounding.
    EXPECT_NEAR(scores[1], scores[0], 1e-4) << delta;
    EXPECT_NEAR(scores[2], scores[0], 1e-4) << delta;
  }
}

TEST(RopeTest, RejectsBadArguments) {
  EXPECT_FALSE(RopeInvFreq(7, 1e4, {}, 0, 0).ok());
  EXPECT_FALSE(RopeInvFreq(8, 0.0, {}, 0, 0).ok());
  EXPECT_FALSE(RopeInvFreq(8, 1e4, {RopeScalingType::kLinear, 0.0}, 0, 0).ok());
  EXPECT_FALSE(RopeInvFreq(8, 1e4, {RopeScalingType::kLlama3, 8.0, 1.0, 4.0, 0}, 0, 0).ok());
  EXPECT_FALSE(RopeInvFreq(8, 1e4, {RopeScalingType::kLlama3, 8.0, 4.0, 4.0, 8192}, 0, 0).ok());
  EXPECT_FALSE(RopeInvFreq(8, 1e4, {RopeScalingType::kDynamic, 2.0}, 0, 100).ok());

  HostTensor x = RandomTensor(DType::kF32, {2, 1, 8}, 1);
  EXPECT_EQ(Rope(x, {0, 1}, {1, 1, 1}).code(), StatusCode::kInvalidArgument);  // inv_freq [3]
  EXPECT_EQ(Rope(x, {0}, {1, 1, 1, 1}).code(), StatusCode::kInvalidArgument);  // positions [1]
}

}  // namespace
}  // namespace millipede
