#include "kernels/attention/attention_state.h"

#include <gtest/gtest.h>

#include <algorithm>
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

// AdvanceTo is Merge with a part already at the new maximum: an online softmax over tiles of
// scores gives Merge's state and accumulator.
TYPED_TEST(AttentionStateTest, AdvanceToFollowsMerge) {
  using State = AttentionStateT<TypeParam>;
  auto exp2 = [](TypeParam x) { return std::exp2(x); };
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> score(-30, 30), value(-1, 1);
  State merged = State::Empty(), advanced = State::Empty();
  TypeParam merged_acc = 0, advanced_acc = 0;
  for (int tile = 0; tile < 6; ++tile) {
    double s[8], v[8];
    double tile_max = -kInf;
    for (int j = 0; j < 8; ++j) {
      s[j] = tile == 2 ? -kInf : score(rng);  // tile 2 is masked out whole
      v[j] = value(rng);
      tile_max = std::max(tile_max, s[j]);
    }
    const TypeParam m_new = static_cast<TypeParam>(std::max<double>(advanced.m, tile_max));
    TypeParam sum = 0, weighted = 0;
    for (int j = 0; j < 8; ++j) {
      const TypeParam p = m_new == -kInf ? 0 : std::exp(static_cast<TypeParam>(s[j]) - m_new);
      sum += p;
      weighted += p * static_cast<TypeParam>(v[j]);
      merged_acc = merged.AddScore(static_cast<TypeParam>(s[j]))
                       .Apply(merged_acc, static_cast<TypeParam>(v[j]));
    }
    advanced_acc = advanced.AdvanceTo(m_new, sum, exp2) * advanced_acc + weighted;
    EXPECT_EQ(advanced.m, merged.m) << "tile " << tile;
  }
  const double tol = std::is_same_v<TypeParam, float> ? 1e-5 : 1e-12;
  EXPECT_NEAR(advanced.Lse(), merged.Lse(), tol);
  EXPECT_NEAR(advanced_acc * advanced.OutputScale(), merged_acc * merged.OutputScale(), tol);
}

TYPED_TEST(AttentionStateTest, AdvanceToFromEmptyAndAtAnUnchangedMaximum) {
  using State = AttentionStateT<TypeParam>;
  auto exp2 = [](TypeParam x) { return std::exp2(x); };
  State state = State::Empty();
  // Nothing seen yet: both empty, the state stays empty and o_acc is dropped (factor 0).
  EXPECT_EQ(state.AdvanceTo(TypeParam(-kInf), 0, exp2), TypeParam(0));
  EXPECT_TRUE(state.IsEmpty());
  EXPECT_EQ(state.d, TypeParam(0));
  EXPECT_EQ(state.AdvanceTo(2, TypeParam(1.5), exp2), TypeParam(0));
  EXPECT_EQ(state.m, TypeParam(2));
  EXPECT_EQ(state.d, TypeParam(1.5));
  // The maximum stays: the factor is exactly 1 and the sums add.
  EXPECT_EQ(state.AdvanceTo(2, TypeParam(0.25), exp2), TypeParam(1));
  EXPECT_EQ(state.d, TypeParam(1.75));
  // A higher maximum scales the old sum by exp(m_old - m_new).
  const TypeParam f = state.AdvanceTo(3, 1, exp2);
  const double tol = std::is_same_v<TypeParam, float> ? 1e-6 : 1e-14;
  EXPECT_NEAR(f, std::exp(-1.0), tol);
  EXPECT_NEAR(state.d, 1.75 * std::exp(-1.0) + 1, 4 * tol);
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
