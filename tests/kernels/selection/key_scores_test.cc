#include "kernels/selection/key_scores.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/attention/attention.h"
#include "tests/kernels/kernel_test_util.h"

namespace millipede {
namespace {

using testing::CView;
using testing::kInf;
using testing::kNaN;
using testing::PoisonedF32;
using testing::RandomTensor;
using testing::TensorOf;
using testing::ToFloats;

HostTensor Positions(const std::vector<int64_t>& values) {
  HostTensor t(DType::kI64, {static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i) t.data<int64_t>()[i] = values[i];
  return t;
}

std::vector<int64_t> Range(int64_t begin, int64_t end) {
  std::vector<int64_t> out;
  for (int64_t p = begin; p < end; ++p) out.push_back(p);
  return out;
}

// The true LSE of each (query, head) over keys at positions 0..n_k-1 (causal), from the attention
// reference: an oracle independent of KeyScoresRef.
HostTensor TrueLse(const HostTensor& q, const HostTensor& k, int64_t q_offset) {
  const int64_t n_q = q.shape()[0], heads = q.shape()[1], d = q.shape()[2];
  HostTensor o(DType::kF32, {n_q, heads, d});
  HostTensor lse = PoisonedF32({n_q, heads});
  AttentionArgs args;
  args.q = CView(q);
  args.k = CView(k);
  args.v = CView(k);
  args.q_offset = q_offset;
  args.o = o.view();
  args.lse = lse.view();
  EXPECT_TRUE(AttentionRef(args).ok());
  return lse;
}

StatusOr<HostTensor> Scores(const HostTensor& q, const HostTensor& q_pos, const HostTensor& k,
                            const HostTensor& k_pos, const HostTensor& lse, float scale = 0.0f) {
  HostTensor score = PoisonedF32({k.shape()[1], k.shape()[0]});
  MP_RETURN_IF_ERROR(KeyScoresRef(
      {CView(q), CView(q_pos), CView(k), CView(k_pos), CView(lse), scale, score.view(), {}}));
  return score;
}

TEST(KeyScoresTest, SoftmaxProbabilitiesByHand) {
  // One query [1, 0] at position 5; keys [1, 0] at 2, [0, 0] at 3 and [4, 4] at 6 (after the
  // query: unseen). scale 1: logits 1 and 0, lse log(e + 1).
  HostTensor q = TensorOf(DType::kF32, {1, 1, 2}, {1, 0});
  HostTensor k = TensorOf(DType::kF32, {3, 1, 2}, {1, 0, 0, 0, 4, 4});
  HostTensor lse = TensorOf(DType::kF32, {1, 1}, {static_cast<float>(std::log(M_E + 1.0))});
  auto s = Scores(q, Positions({5}), k, Positions({2, 3, 6}), lse, 1.0f);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const std::vector<float> v = ToFloats(*s);
  EXPECT_NEAR(v[0], M_E / (M_E + 1.0), 1e-6);
  EXPECT_NEAR(v[1], 1.0 / (M_E + 1.0), 1e-6);
  EXPECT_EQ(v[2], 0.0f);
}

// With the true LSE, each (query, head) spreads probability 1 over the keys it sees, so the
// scores of KV head g sum to the number of (query, head of g) pairs that see a key; the per-head
// group sums follow the GQA mapping h / group.
TEST(KeyScoresTest, ScoresOfEachKvHeadSumToItsQueryHeadCount) {
  for (DType kdtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    const int64_t n_q = 5, heads = 6, kv_heads = 2, d = 16, n_k = 23;
    HostTensor q = RandomTensor(DType::kF32, {n_q, heads, d}, 1, -1.5f, 1.5f);
    HostTensor k = RandomTensor(kdtype, {n_k, kv_heads, d}, 2, -1.5f, 1.5f);
    // Queries at 18..22: all see keys, the first ones not all of them.
    HostTensor lse = TrueLse(q, k, 18);
    auto s = Scores(q, Positions(Range(18, 23)), k, Positions(Range(0, n_k)), lse);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    const std::vector<float> v = ToFloats(*s);
    for (int64_t g = 0; g < kv_heads; ++g) {
      double sum = 0;
      for (int64_t j = 0; j < n_k; ++j) sum += v[g * n_k + j];
      EXPECT_NEAR(sum, static_cast<double>(n_q * heads / kv_heads), 1e-4) << DTypeName(kdtype);
    }
    // The last key (position 22) is seen by the last query only.
    const std::vector<float> qf = ToFloats(q), kf = ToFloats(k), lf = ToFloats(lse);
    for (int64_t g = 0; g < kv_heads; ++g) {
      double want = 0;
      for (int64_t h = g * heads / kv_heads; h < (g + 1) * heads / kv_heads; ++h) {
        double dot = 0;
        for (int64_t c = 0; c < d; ++c)
          dot +=
              double{qf[((n_q - 1) * heads + h) * d + c]} * kf[((n_k - 1) * kv_heads + g) * d + c];
        want += std::exp(dot / std::sqrt(double(d)) - lf[(n_q - 1) * heads + h]);
      }
      EXPECT_NEAR(v[g * n_k + n_k - 1], want, 1e-6 * want);
    }
    EXPECT_TRUE(testing::AllFinite(*s));
  }
}

// Keys split between two "ranks" (interleaved positions) score exactly what they score together,
// when both use the LSE over all keys.
TEST(KeyScoresTest, SplitKeysScoreAsTheWhole) {
  const int64_t n_q = 4, heads = 4, kv_heads = 4, d = 8, n_k = 30;
  HostTensor q = RandomTensor(DType::kF32, {n_q, heads, d}, 3, -2.0f, 2.0f);
  HostTensor k = RandomTensor(DType::kF32, {n_k, kv_heads, d}, 4, -2.0f, 2.0f);
  HostTensor lse = TrueLse(q, k, 26);
  HostTensor q_pos = Positions(Range(26, 30));
  auto whole = Scores(q, q_pos, k, Positions(Range(0, n_k)), lse);
  ASSERT_TRUE(whole.ok());
  const std::vector<float> w = ToFloats(*whole);
  for (int part = 0; part < 2; ++part) {
    std::vector<int64_t> pos;
    for (int64_t j = part; j < n_k; j += 2) pos.push_back(j);
    HostTensor k_part(DType::kF32, {static_cast<int64_t>(pos.size()), kv_heads, d});
    for (size_t i = 0; i < pos.size(); ++i)
      for (int64_t c = 0; c < kv_heads * d; ++c)
        k_part.data<float>()[i * kv_heads * d + c] = k.data<float>()[pos[i] * kv_heads * d + c];
    auto s = Scores(q, q_pos, k_part, Positions(pos), lse);
    ASSERT_TRUE(s.ok());
    const std::vector<float> v = ToFloats(*s);
    for (int64_t g = 0; g < kv_heads; ++g)
      for (size_t i = 0; i < pos.size(); ++i)
        EXPECT_EQ(v[g * pos.size() + i], w[g * n_k + pos[i]]) << g << " " << pos[i];
  }
}

TEST(KeyScoresTest, MinusInfLseAndNoQueriesContributeNothing) {
  HostTensor q = RandomTensor(DType::kF32, {2, 2, 4}, 5);
  HostTensor k = RandomTensor(DType::kF32, {3, 1, 4}, 6);
  HostTensor lse = TensorOf(DType::kF32, {2, 2}, {-kInf, -kInf, -kInf, -kInf});
  auto s = Scores(q, Positions({10, 11}), k, Positions({0, 1, 2}), lse);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(ToFloats(*s), (std::vector<float>{0, 0, 0}));
  HostTensor q0(DType::kF32, {0, 2, 4});
  HostTensor lse0(DType::kF32, {0, 2});
  auto s0 = Scores(q0, Positions({}), k, Positions({0, 1, 2}), lse0);
  ASSERT_TRUE(s0.ok());
  EXPECT_EQ(ToFloats(*s0), (std::vector<float>{0, 0, 0}));
  HostTensor k0(DType::kF32, {0, 1, 4});
  EXPECT_TRUE(Scores(q, Positions({10, 11}), k0, Positions({}), lse).ok());
}

TEST(KeyScoresTest, RejectsBadLseAndArguments) {
  HostTensor q = RandomTensor(DType::kF32, {1, 2, 4}, 5);
  HostTensor k = RandomTensor(DType::kF32, {3, 1, 4}, 6);
  HostTensor q_pos = Positions({4}), k_pos = Positions({0, 1, 2});
  for (float bad : {kNaN, kInf}) {
    HostTensor lse = TensorOf(DType::kF32, {1, 2}, {0.5f, bad});
    EXPECT_EQ(Scores(q, q_pos, k, k_pos, lse).status().code(), StatusCode::kInvalidArgument);
  }
  HostTensor lse = TensorOf(DType::kF32, {1, 2}, {0.5f, 0.5f});
  EXPECT_TRUE(Scores(q, q_pos, k, k_pos, lse).ok());
  EXPECT_FALSE(Scores(q, q_pos, k, k_pos, lse, -1.0f).ok());
  EXPECT_FALSE(Scores(q, Positions({4, 5}), k, k_pos, lse).ok());
  EXPECT_FALSE(Scores(q, q_pos, k, Positions({0, 1}), lse).ok());
  HostTensor k3 = RandomTensor(DType::kF32, {3, 3, 4}, 6);  // 2 heads over 3 KV heads
  EXPECT_FALSE(Scores(q, q_pos, k3, k_pos, lse).ok());
  HostTensor k_d = RandomTensor(DType::kF32, {3, 1, 5}, 6);
  EXPECT_FALSE(Scores(q, q_pos, k_d, k_pos, lse).ok());
  HostTensor k_i = RandomTensor(DType::kF64, {3, 1, 4}, 6);
  EXPECT_FALSE(Scores(q, q_pos, k_i, k_pos, lse).ok());
  HostTensor score(DType::kF32, {3, 1});  // transposed
  EXPECT_FALSE(
      KeyScoresRef(
          {CView(q), CView(q_pos), CView(k), CView(k_pos), CView(lse), 0.0f, score.view(), {}})
          .ok());
}

// diag_score from a brute-force loop over (query, head, key) in double; its sums over every
// diagonal equal the keys' scores; diagonals at or beyond n_diag are left out.
TEST(KeyScoresTest, DiagonalScoresAreSumsAlongDiagonals) {
  const int64_t n_q = 6, heads = 8, kv_heads = 2, d = 8, n_k = 40, group = heads / kv_heads;
  HostTensor q = RandomTensor(DType::kF32, {n_q, heads, d}, 12, -1.5f, 1.5f);
  HostTensor k = RandomTensor(DType::kBF16, {n_k, kv_heads, d}, 13, -1.5f, 1.5f);
  HostTensor lse = TrueLse(q, k, n_k - n_q);
  // Keys in reverse position order; queries at the last positions.
  std::vector<int64_t> k_positions;
  for (int64_t j = 0; j < n_k; ++j) k_positions.push_back(n_k - 1 - j);
  HostTensor k_rev(DType::kBF16, {n_k, kv_heads, d});
  for (int64_t j = 0; j < n_k; ++j)
    for (int64_t c = 0; c < kv_heads * d; ++c)
      k_rev.data<uint16_t>()[j * kv_heads * d + c] =
          k.data<uint16_t>()[(n_k - 1 - j) * kv_heads * d + c];
  HostTensor q_pos = Positions(Range(n_k - n_q, n_k)), k_pos = Positions(k_positions);
  for (int64_t n_diag : {int64_t{0}, int64_t{7}, n_k, n_k + 5}) {
    HostTensor score = PoisonedF32({kv_heads, n_k}), diag = PoisonedF32({kv_heads, n_diag});
    KeyScoresArgs args{CView(q),   CView(q_pos), CView(k_rev), CView(k_pos),
                       CView(lse), 0.0f,         score.view(), diag.view()};
    ASSERT_TRUE(KeyScoresRef(args).ok());
    const std::vector<float> qf = ToFloats(q), kf = ToFloats(k_rev), lf = ToFloats(lse);
    std::vector<double> want(static_cast<size_t>(kv_heads * n_diag), 0.0);
    for (int64_t t = 0; t < n_q; ++t)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t j = 0; j < n_k; ++j) {
          const int64_t diagonal = (n_k - n_q + t) - k_positions[j];
          if (diagonal < 0 || diagonal >= n_diag) continue;
          double dot = 0;
          for (int64_t c = 0; c < d; ++c)
            dot += double{qf[(t * heads + h) * d + c]} * kf[(j * kv_heads + h / group) * d + c];
          want[(h / group) * n_diag + diagonal] +=
              std::exp(dot / std::sqrt(double(d)) - lf[t * heads + h]);
        }
    const std::vector<float> got = ToFloats(diag), s = ToFloats(score);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6 * (1 + want[i]));
    if (n_diag >= n_k) {
      for (int64_t g = 0; g < kv_heads; ++g) {
        double by_key = 0, by_diag = 0;
        for (int64_t j = 0; j < n_k; ++j) by_key += s[g * n_k + j];
        for (int64_t i = 0; i < n_diag; ++i) by_diag += got[g * n_diag + i];
        EXPECT_NEAR(by_diag, by_key, 1e-5);
        EXPECT_NEAR(by_diag, static_cast<double>(n_q * group), 1e-4);
      }
    }
  }
  // A diag_score of the wrong head count is refused.
  HostTensor score = PoisonedF32({kv_heads, n_k}), diag = PoisonedF32({kv_heads + 1, 4});
  EXPECT_FALSE(KeyScoresRef({CView(q), CView(q_pos), CView(k_rev), CView(k_pos), CView(lse), 0.0f,
                             score.view(), diag.view()})
                   .ok());
}

}  // namespace
}  // namespace millipede
