// The CPU kernels' vector helpers: ExpF's accuracy over its whole range and at its edges, and the
// widening/narrowing rows against common/dtype.h's scalar conversions.
#include "kernels/cpu/vector_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace millipede {
namespace {

TEST(VectorMathTest, ExpWithinAnUlpAndRightAtTheEdges) {
  std::vector<float> x;
  for (float v = -87.0f; v <= 88.0f; v += 0.0137f) x.push_back(v);
  std::vector<float> row = x;
  cpu::ExpShiftedSum(row.data(), static_cast<int64_t>(row.size()), 0.0f);
  double worst = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(static_cast<double>(x[i]));
    worst = std::max(worst, std::abs(row[i] - want) / want);
  }
  EXPECT_LT(worst, 1.5e-7);
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> edges = {-inf, -1000.0f, -87.5f, 0.0f, 89.0f, inf};
  cpu::ExpShiftedSum(edges.data(), 6, 0.0f);
  EXPECT_EQ(edges[0], 0.0f);
  EXPECT_EQ(edges[1], 0.0f);
  EXPECT_EQ(edges[2], 0.0f);
  EXPECT_EQ(edges[3], 1.0f);
  EXPECT_EQ(edges[4], inf);
  EXPECT_EQ(edges[5], inf);
}

TEST(VectorMathTest, ExpShiftedSumAddsTheRow) {
  std::vector<float> row = {0.5f, -1.0f, -std::numeric_limits<float>::infinity(), 2.0f};
  const float sum = cpu::ExpShiftedSum(row.data(), 4, 2.0f);
  EXPECT_NEAR(sum, std::exp(-1.5) + std::exp(-3.0) + 1.0, 1e-6);
  EXPECT_EQ(row[2], 0.0f);
  EXPECT_EQ(cpu::RowMax(row.data(), 0), -std::numeric_limits<float>::infinity());
}

TEST(VectorMathTest, WidenAndNarrowMatchTheScalarConversions) {
  std::mt19937 rng(3);
  std::vector<float> values(10007);
  for (float& v : values)
    v = std::ldexp(std::uniform_real_distribution<float>(-1, 1)(rng),
                   std::uniform_int_distribution<int>(-30, 18)(rng));
  values[0] = std::numeric_limits<float>::infinity();
  values[1] = -0.0f;
  for (const DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    std::vector<uint8_t> want(values.size() * DTypeSize(dtype)), got(want.size());
    for (size_t i = 0; i < values.size(); ++i) StoreFromFloat(want.data(), dtype, i, values[i]);
    cpu::NarrowRow(values.data(), static_cast<int64_t>(values.size()), got.data(), dtype, 0);
    EXPECT_EQ(got, want) << DTypeName(dtype);
    std::vector<float> wide(values.size());
    cpu::WidenRow(got.data(), dtype, 5, static_cast<int64_t>(values.size()) - 5, wide.data());
    for (size_t i = 5; i < values.size(); ++i)
      ASSERT_EQ(wide[i - 5], LoadAsFloat(got.data(), dtype, i)) << DTypeName(dtype) << " " << i;
  }
}

}  // namespace
}  // namespace millipede
