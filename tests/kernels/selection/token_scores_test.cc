// TokenScoresRef: by hand; against the attention reference (values that are one-hot rows make
// attention's output each head's softmax probabilities, an oracle independent of the scores);
// against a brute force over random inputs of every key dtype; empty sets and bad arguments.
#include "kernels/selection/token_scores.h"

#include <gtest/gtest.h>

#include <algorithm>
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

StatusOr<HostTensor> Scores(const HostTensor& q, const HostTensor& k, const HostTensor& lse,
                            float scale = 0.0f) {
  HostTensor score = PoisonedF32({k.shape()[1], k.shape()[0]});
  MP_RETURN_IF_ERROR(TokenScoresRef({CView(q), CView(k), CView(lse), scale, score.view()}));
  return score;
}

TEST(TokenScoresTest, LargestProbabilityOverTheGroupByHand) {
  // Two query heads over one KV head, scale 1. Keys [1, 0] and [0, 1]. Head 0 = [1, 0]: logits
  // 1, 0; head 1 = [0, 2]: logits 0, 2. Each head's LSE over both keys.
  HostTensor q = TensorOf(DType::kF32, {2, 2}, {1, 0, 0, 2});
  HostTensor k = TensorOf(DType::kF32, {2, 1, 2}, {1, 0, 0, 1});
  const double lse0 = std::log(M_E + 1.0), lse1 = std::log(1.0 + M_E * M_E);
  HostTensor lse = TensorOf(DType::kF32, {2}, {static_cast<float>(lse0), static_cast<float>(lse1)});
  auto s = Scores(q, k, lse, 1.0f);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const std::vector<float> v = ToFloats(*s);
  // Key 0: head 0 gives e / (e + 1) = 0.73, head 1 gives 1 / (1 + e^2) = 0.12.
  EXPECT_NEAR(v[0], M_E / (M_E + 1.0), 1e-6);
  // Key 1: head 0 gives 1 / (e + 1) = 0.27, head 1 gives e^2 / (1 + e^2) = 0.88.
  EXPECT_NEAR(v[1], M_E * M_E / (1.0 + M_E * M_E), 1e-6);
}

// Attention with V = identity rows gives o[h, j] = softmax probability of key j for head h, so
// the score of KV head g is the max of o over g's query heads: a second, independent oracle.
TEST(TokenScoresTest, EqualsTheMaxOfAttentionProbabilities) {
  for (DType kdtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    const int64_t heads = 8, kv_heads = 2, d = 24, n_k = 19;
    HostTensor q = RandomTensor(DType::kF32, {1, heads, d}, 3, -1.5f, 1.5f);
    HostTensor k = RandomTensor(kdtype, {n_k, kv_heads, d}, 4, -1.5f, 1.5f);
    HostTensor v(DType::kF32, {n_k, kv_heads, d});
    for (int64_t i = 0; i < v.NumElements(); ++i) {
      const int64_t j = i / (kv_heads * d), c = i % d;
      v.data<float>()[i] = j == c ? 1.0f : 0.0f;
    }
    HostTensor o = PoisonedF32({1, heads, d}), lse = PoisonedF32({1, heads});
    AttentionArgs a;
    a.q = CView(q);
    a.k = CView(k);
    a.v = CView(v);
    a.mask = AttentionMask::kNone;
    a.o = o.view();
    a.lse = lse.view();
    ASSERT_TRUE(AttentionRef(a).ok());
    HostTensor q2 = TensorOf(DType::kF32, {heads, d}, ToFloats(q));
    HostTensor lse1 = TensorOf(DType::kF32, {heads}, ToFloats(lse));
    auto s = Scores(q2, k, lse1);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    const std::vector<float> got = ToFloats(*s), probs = ToFloats(o);
    for (int64_t g = 0; g < kv_heads; ++g)
      for (int64_t j = 0; j < n_k; ++j) {
        float want = 0;
        for (int64_t h = g * heads / kv_heads; h < (g + 1) * heads / kv_heads; ++h)
          want = std::max(want, probs[h * d + j]);
        EXPECT_NEAR(got[g * n_k + j], want, 1e-5 * want + 1e-7)
            << DTypeName(kdtype) << " g " << g << " j " << j;
      }
  }
}

TEST(TokenScoresTest, MatchesBruteForceWithAnyLseAndScale) {
  for (DType kdtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    const int64_t heads = 6, kv_heads = 3, d = 7, n_k = 41;
    HostTensor q = RandomTensor(DType::kF32, {heads, d}, 5, -2.0f, 2.0f);
    HostTensor k = RandomTensor(kdtype, {n_k, kv_heads, d}, 6, -2.0f, 2.0f);
    // Any finite LSE (the caller's, over keys not all given here), one head of KV head 1 -inf.
    HostTensor lse = RandomTensor(DType::kF32, {heads}, 7, 1.0f, 4.0f);
    lse.data<float>()[3] = -kInf;
    const float scale = 0.3f;
    auto s = Scores(q, k, lse, scale);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    const std::vector<float> got = ToFloats(*s), qf = ToFloats(q), kf = ToFloats(k),
                             lf = ToFloats(lse);
    for (int64_t g = 0; g < kv_heads; ++g)
      for (int64_t j = 0; j < n_k; ++j) {
        double want = 0;
        for (int64_t h = 2 * g; h < 2 * g + 2; ++h) {
          if (std::isinf(lf[h])) continue;
          double dot = 0;
          for (int64_t c = 0; c < d; ++c)
            dot += double{qf[h * d + c]} * kf[(j * kv_heads + g) * d + c];
          want = std::max(want, std::exp(scale * dot - lf[h]));
        }
        EXPECT_NEAR(got[g * n_k + j], want, 1e-6 * want) << DTypeName(kdtype);
      }
  }
}

TEST(TokenScoresTest, EmptySetsAndHeadsThatSeeNothing) {
  HostTensor q = RandomTensor(DType::kF32, {4, 8}, 8);
  HostTensor lse = TensorOf(DType::kF32, {4}, {-kInf, -kInf, 1.0f, 2.0f});
  // No keys: nothing to write, no error.
  HostTensor none(DType::kBF16, {0, 2, 8});
  auto s = Scores(q, none, lse);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->NumElements(), 0);
  // KV head 0's query heads both see no key: its scores are 0; KV head 1's are positive.
  HostTensor k = RandomTensor(DType::kF32, {5, 2, 8}, 9);
  s = Scores(q, k, lse);
  ASSERT_TRUE(s.ok());
  const std::vector<float> v = ToFloats(*s);
  for (int j = 0; j < 5; ++j) {
    EXPECT_EQ(v[j], 0.0f);
    EXPECT_GT(v[5 + j], 0.0f);
  }
}

TEST(TokenScoresTest, BadArgumentsAreRefused) {
  HostTensor q = RandomTensor(DType::kF32, {4, 8}, 1), k = RandomTensor(DType::kF32, {3, 2, 8}, 2);
  HostTensor lse = TensorOf(DType::kF32, {4}, {1, 1, 1, 1});
  auto code = [](const TokenScoresArgs& a) { return TokenScoresRef(a).code(); };
  HostTensor score(DType::kF32, {2, 3});
  EXPECT_EQ(code({CView(q), CView(k), CView(lse), 0.0f, score.view()}), StatusCode::kOk);
  HostTensor q3 = RandomTensor(DType::kF32, {3, 8}, 1);  // 3 heads over 2 KV heads
  EXPECT_EQ(code({CView(q3), CView(k), CView(lse), 0.0f, score.view()}),
            StatusCode::kInvalidArgument);
  HostTensor wrong_score(DType::kF32, {3, 2});
  EXPECT_EQ(code({CView(q), CView(k), CView(lse), 0.0f, wrong_score.view()}),
            StatusCode::kInvalidArgument);
  HostTensor k_i32(DType::kI32, {3, 2, 8});
  EXPECT_EQ(code({CView(q), CView(k_i32), CView(lse), 0.0f, score.view()}),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(code({CView(q), CView(k), CView(lse), -1.0f, score.view()}),
            StatusCode::kInvalidArgument);
  for (float bad : {kNaN, kInf}) {
    HostTensor bad_lse = TensorOf(DType::kF32, {4}, {1, bad, 1, 1});
    EXPECT_EQ(code({CView(q), CView(k), CView(bad_lse), 0.0f, score.view()}),
              StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace millipede
