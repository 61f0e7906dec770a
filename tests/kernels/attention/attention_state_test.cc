#include "kernels/attention/attention_state.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace millipede {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

template <typename T>
class AttentionStateTest : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(AttentionStateTest, Types);

TYPED_TEST(AttentionStateTest, OnlineScoresGiveLogSumExpAndSoftmaxWeights) {
  using State = AttentionStateT<TypeParam>;
  // Scores 1, 3, 2 with scalar values 10, 20, 30.
  const double scores[] = {1, 3, 2}, values[] = {10, 20, 30};
  State state = State::Empty();
  TypeParam acc = 0;
  for (int j = 0; j < 3; ++j) {
    const typename State::Factors f = state.AddScore(static_cast<TypeParam>(scores[j]));
    acc = f.Apply(acc, static_cast<TypeParam>(values[j]));
  }
  const double z = std::exp(1.0) + std::exp(3.0) + std::exp(2.0);
  const double tol = std::is_same_v<TypeParam, float> ? 1e-5 : 1e-12;
  EXPECT_NEAR(state.Lse(), std::log(z), tol);
  EXPECT_NEAR(acc * state.OutputScale(),
              (10 * std::exp(1.0) + 20 * std::exp(3.0) + 30 * std::exp(2.0)) / z, 30 * tol);
}

TYPED_TEST(AttentionStateTest, EmptyStatesAndMaskedScores) {
  using State = AttentionStateT<TypeParam>;
  const TypeParam nan = std::numeric_limits<TypeParam>::quiet_NaN();
  State empty = State::Empty();
  EXPECT_TRUE(empty.IsEmpty());
  EXPECT_EQ(empty.Lse(), -kInf);
  EXPECT_EQ(empty.OutputScale(), 0);
  // empty + empty: both factors 0, so garbage accumulators are never read.
  typename State::Factors f = empty.Merge(State::Empty());
  EXPECT_EQ(f.self, 0);
  EXPECT_EQ(f.other, 0);
  EXPECT_EQ(f.Apply(nan, nan), 0);
  EXPECT_TRUE(empty.IsEmpty());
  // A masked score (-inf) is the identity.
  State s = State::FromLse(TypeParam(2));
  f = s.AddScore(-std::numeric_limits<TypeParam>::infinity());
  EXPECT_EQ(f.Apply(TypeParam(7), nan), 7);
  EXPECT_EQ(s.Lse(), 2);
  // empty + part: the part, with its accumulator taken as is.
  State e = State::Empty();
  f = e.Merge(State::FromLse(TypeParam(-3)));
  EXPECT_EQ(f.Apply(nan, TypeParam(5)), 5);
  EXPECT_EQ(e.Lse(), -3);
  EXPECT_EQ(e.OutputScale(), 1);
}

TYPED_TEST(AttentionStateTest, HugeMagnitudesStayFinite) {
  using State = AttentionStateT<TypeParam>;
  const TypeParam big = std::is_same_v<TypeParam, float> ? TypeParam(3e38) : TypeParam(1e300);
  State s = State::FromLse(big);
  typename State::Factors f = s.Merge(State::FromLse(-big));
  EXPECT_EQ(f.self, 1);
  EXPECT_EQ(f.other, 0);
  EXPECT_EQ(s.Lse(), big);
  f = s.Merge(State::FromLse(big));
  EXPECT_EQ(f.self, 1);
  EXPECT_EQ(f.other, 1);
  EXPECT_TRUE(std::isfinite(s.Lse()));
  EXPECT_EQ(s.OutputScale(), TypeParam(0.5));
}

TEST(AttentionStateOrderTest, AnyMergeOrderGivesTheSameState) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> dist(-20, 20);
  std::vector<double> lse(9);
  for (double& x : lse) x = dist(rng);
  lse[4] = -kInf;
  using State = AttentionStateT<double>;
  State forward = State::Empty(), backward = State::Empty(), tree = State::Empty();
  for (double x : lse) forward.Merge(State::FromLse(x));
  for (auto it = lse.rbegin(); it != lse.rend(); ++it) backward.Merge(State::FromLse(*it));
  State left = State::Empty(), right = State::Empty();
  for (int i = 0; i < 4; ++i) left.Merge(State::FromLse(lse[i]));
  for (int i = 4; i < 9; ++i) right.Merge(State::FromLse(lse[i]));
  tree.Merge(right);
  tree.Merge(left);
  EXPECT_NEAR(forward.Lse(), backward.Lse(), 1e-12);
  EXPECT_NEAR(forward.Lse(), tree.Lse(), 1e-12);
}

}  // namespace
}  // namespace millipede
