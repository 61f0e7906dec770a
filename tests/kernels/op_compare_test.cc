// The comparison rules of the GPU-vs-CPU op harness, checked on the CPU: each bound catches what
// it is for, and non-finite values follow the fixed rules.
#include "tests/kernels/op_compare.h"

#include <gtest/gtest.h>

#include <vector>

namespace millipede {
namespace {

using testing::kInf;
using testing::kNaN;
using testing::MatchesReference;
using testing::Tolerance;

TEST(OpCompareTest, ExactNeedsEqualValues) {
  const std::vector<float> expected = {1.0f, -2.5f, 0.0f, 3e30f};
  EXPECT_TRUE(MatchesReference(expected, expected, Tolerance::Exact()));
  EXPECT_TRUE(MatchesReference({1.0f, -2.5f, -0.0f, 3e30f}, expected, Tolerance::Exact()));
  EXPECT_FALSE(MatchesReference({1.0f, -2.5f, 0.0f, std::nextafter(3e30f, 0.0f)}, expected,
                                Tolerance::Exact()));
  EXPECT_FALSE(MatchesReference({1.0f, -2.5f, 0.0f}, expected, Tolerance::Exact()));
}

TEST(OpCompareTest, NaNFailsUnlessTheReferenceIsNaNAndTheOpPropagatesIt) {
  const Tolerance loose = Tolerance::Normalised(0.5);
  EXPECT_FALSE(MatchesReference({kNaN, 1.0f}, {0.0f, 1.0f}, loose));
  EXPECT_FALSE(MatchesReference({0.0f, 1.0f}, {kNaN, 1.0f}, loose));
  EXPECT_FALSE(MatchesReference({kNaN, 1.0f}, {kNaN, 1.0f}, loose));
  EXPECT_TRUE(MatchesReference({kNaN, 1.0f}, {kNaN, 1.0f}, loose.WithNanMatchingNan()));
  EXPECT_FALSE(MatchesReference({kNaN, 1.0f}, {0.0f, 1.0f}, loose.WithNanMatchingNan()));
  EXPECT_FALSE(MatchesReference({kInf, 1.0f}, {kNaN, 1.0f}, loose.WithNanMatchingNan()));
}

TEST(OpCompareTest, InfinitiesMustMatchInSign) {
  const Tolerance loose = Tolerance::Normalised(0.5);
  EXPECT_TRUE(MatchesReference({kInf, -kInf, 1.0f}, {kInf, -kInf, 1.0f}, loose));
  EXPECT_FALSE(MatchesReference({-kInf, 1.0f}, {kInf, 1.0f}, loose));
  EXPECT_FALSE(MatchesReference({3e38f, 1.0f}, {kInf, 1.0f}, loose));
  EXPECT_FALSE(MatchesReference({kInf, 1.0f}, {3e38f, 1.0f}, loose));
  // Infinities take no part in the error measures.
  EXPECT_TRUE(MatchesReference({kInf, 1.0f}, {kInf, 1.0f}, Tolerance::Exact()));
}

TEST(OpCompareTest, NormalisedBoundsTheWorstElement) {
  const std::vector<float> expected = {4.0f, -2.0f, 1.0f, 0.5f};
  // Worst error 0.03 of max |expected| = 4.
  const std::vector<float> actual = {4.0f, -2.0f + 0.12f, 1.0f, 0.5f};
  EXPECT_TRUE(MatchesReference(actual, expected, Tolerance::Normalised(0.031)));
  EXPECT_FALSE(MatchesReference(actual, expected, Tolerance::Normalised(0.029)));
}

TEST(OpCompareTest, NmseCatchesAnErrorSpreadOverEveryElement) {
  // One large value and many small ones, each small one off by 0.9 t of the largest: the worst
  // element is within t, the mean squared error is not within t^2.
  const double t = 1e-2;
  std::vector<float> expected(100, 1.0f), actual(100, 1.0f + 0.9f * 1e-2f * 100.0f);
  expected[0] = actual[0] = 100.0f;
  Tolerance worst_only = Tolerance::Normalised(t);
  worst_only.nmse = testing::kUnbounded;
  EXPECT_TRUE(MatchesReference(actual, expected, worst_only));
  EXPECT_FALSE(MatchesReference(actual, expected, Tolerance::Normalised(t)));
}

TEST(OpCompareTest, AllZeroReferenceUsesAbsoluteErrors) {
  const std::vector<float> zeros(4, 0.0f);
  EXPECT_TRUE(MatchesReference({0.0f, 1e-4f, 0.0f, -1e-4f}, zeros, Tolerance::Normalised(1e-3)));
  EXPECT_FALSE(MatchesReference({0.0f, 1e-2f, 0.0f, 0.0f}, zeros, Tolerance::Normalised(1e-3)));
}

TEST(OpCompareTest, ElementwiseBoundsEveryElement) {
  const std::vector<float> expected = {1000.0f, 1.0f, 0.0f};
  const Tolerance tolerance = Tolerance::Elementwise(1e-3, 1e-4);
  EXPECT_TRUE(MatchesReference({1000.9f, 1.0009f, 9e-5f}, expected, tolerance));
  EXPECT_FALSE(MatchesReference({1000.0f, 1.0f, 2e-4f}, expected, tolerance));
  EXPECT_FALSE(MatchesReference({1001.5f, 1.0f, 0.0f}, expected, tolerance));
  // rtol 0: a maximum absolute error.
  EXPECT_TRUE(MatchesReference({1000.01f, 1.0f}, {1000.0f, 1.0f}, Tolerance::Elementwise(0, 2e-2)));
  EXPECT_FALSE(MatchesReference({1000.1f, 1.0f}, {1000.0f, 1.0f}, Tolerance::Elementwise(0, 2e-2)));
}

TEST(OpCompareTest, BitwiseNeedsTheSameBytes) {
  EXPECT_TRUE(MatchesReference({1.0f, -0.0f, kInf}, {1.0f, -0.0f, kInf}, Tolerance::Bitwise()));
  EXPECT_FALSE(MatchesReference({1.0f, 0.0f}, {1.0f, -0.0f}, Tolerance::Bitwise()));
  HostTensor index(DType::kI32, {3}), same(DType::kI32, {3}), wider(DType::kI64, {3});
  for (int i = 0; i < 3; ++i) {
    index.data<int32_t>()[i] = same.data<int32_t>()[i] = 7 * i;
    wider.data<int64_t>()[i] = 7 * i;
  }
  EXPECT_TRUE(MatchesReference(same, index, Tolerance::Bitwise()));
  EXPECT_FALSE(MatchesReference(wider, index, Tolerance::Bitwise()));
  same.data<int32_t>()[2] = 15;
  EXPECT_FALSE(MatchesReference(same, index, Tolerance::Bitwise()));
  // Integers have no error measure: a numeric tolerance on them is refused.
  EXPECT_FALSE(MatchesReference(index, index, Tolerance::Normalised(0.5)));
}

TEST(OpCompareTest, TensorsOfAnyDtypeAndShape) {
  const HostTensor expected = testing::TensorOf(DType::kBF16, {2, 2}, {1.0f, 2.0f, 3.0f, 4.0f});
  const HostTensor same = testing::TensorOf(DType::kF32, {2, 2}, {1.0f, 2.0f, 3.0f, 4.0f});
  const HostTensor flat = testing::TensorOf(DType::kF32, {4}, {1.0f, 2.0f, 3.0f, 4.0f});
  EXPECT_TRUE(MatchesReference(same, expected, Tolerance::Exact(), "out"));
  EXPECT_FALSE(MatchesReference(flat, expected, Tolerance::Exact()));
}

}  // namespace
}  // namespace millipede
