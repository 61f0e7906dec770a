// TokenScoresCuda against TokenScoresRef: random queries and keys (F32, BF16, F16), head dims
// from 1 to 256 (partial lanes, more than one column per lane), GQA groups of 1 to 16, key
// counts that leave partial blocks and warps, LSEs of each head over the given keys (so the
// scores are probabilities) with some heads -inf; every score written (outputs start as NaN),
// guard bands checked. Skips without a GPU.
#include "kernels/selection/token_scores_cuda.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/selection/token_scores.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/op_harness.h"

namespace millipede {
namespace {

using testing::DeviceTensor;
using testing::HaveGpu;
using testing::kInf;
using testing::OpCheck;
using testing::RandomTensor;
using testing::Tolerance;

struct Case {
  int64_t heads, kv_heads, head_dim, n_k;
  DType k_dtype;
  // K starts 16-byte aligned (the fast path for BF16/F16 at head_dim 64/128/256 and groups of at
  // most 8), or one element off it (the one-row-per-warp path).
  bool aligned = false;
};

class TokenScoresCudaTest : public testing::GpuOpTest<Case> {};

// Each head's true LSE over the keys (double), except every third head, which is -inf.
HostTensor MakeLse(const HostTensor& q, const HostTensor& k) {
  const int64_t heads = q.shape()[0], d = q.shape()[1];
  const int64_t n_k = k.shape()[0], kv_heads = k.shape()[1], group = heads / kv_heads;
  const std::vector<float> qf = testing::ToFloats(q), kf = testing::ToFloats(k);
  HostTensor lse(DType::kF32, {heads});
  for (int64_t h = 0; h < heads; ++h) {
    double sum = 0;
    for (int64_t j = 0; j < n_k; ++j) {
      double dot = 0;
      for (int64_t c = 0; c < d; ++c)
        dot += double{qf[h * d + c]} * kf[(j * kv_heads + h / group) * d + c];
      sum += std::exp(dot / std::sqrt(static_cast<double>(d)));
    }
    const bool empty = sum == 0 || h % 3 == 2;
    lse.data<float>()[h] = empty ? -kInf : static_cast<float>(std::log(sum));
  }
  return lse;
}

TEST_P(TokenScoresCudaTest, MatchesReference) {
  const Case c = GetParam();
  HostTensor q = RandomTensor(DType::kF32, {c.heads, c.head_dim}, 31, -2.0f, 2.0f);
  HostTensor k = RandomTensor(c.k_dtype, {c.n_k, c.kv_heads, c.head_dim}, 32, -2.0f, 2.0f);
  OpCheck check("token_scores");
  const int iq = check.Input(q);
  const int ik = check.Input(k, c.aligned ? 0 : DTypeSize(c.k_dtype));
  const int ilse = check.Input(MakeLse(q, k));
  const int iscore =
      check.Output("score", testing::PoisonedF32({c.kv_heads, c.n_k}), Tolerance::Normalised(2e-5));
  ASSERT_TRUE(check.Run(
      [&](const OpCheck::Tensors& t) {
        return TokenScoresArgs{t.cview(iq), t.cview(ik), t.cview(ilse), 0.0f, t.view(iscore)};
      },
      TokenScoresRef, TokenScoresCuda));
  EXPECT_TRUE(testing::AllFinite(check.actual(iscore)));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, TokenScoresCudaTest,
    ::testing::Values(
        Case{32, 8, 128, 5000, DType::kBF16}, Case{4, 4, 64, 33, DType::kF32},
        Case{6, 2, 40, 100, DType::kF16}, Case{16, 1, 256, 700, DType::kBF16},
        Case{2, 2, 1, 31, DType::kF32}, Case{28, 4, 128, 1, DType::kF16},
        Case{8, 8, 96, 129, DType::kBF16}, Case{4, 2, 64, 0, DType::kBF16},
        Case{32, 8, 128, 131073, DType::kBF16, true}, Case{28, 4, 128, 1, DType::kF16, true},
        Case{8, 8, 64, 777, DType::kF16, true}, Case{16, 2, 256, 1000, DType::kBF16, true},
        Case{6, 2, 64, 65, DType::kBF16, true},
        Case{16, 1, 256, 700, DType::kBF16, true},  // group 16: the other path
        Case{4, 2, 64, 0, DType::kF16, true},
        // FP8 keys: the rows path (8-byte loads) and the per-key one.
        Case{32, 8, 128, 5000, DType::kF8E4M3, true}, Case{16, 2, 64, 777, DType::kF8E4M3, true},
        Case{6, 2, 40, 100, DType::kF8E4M3}));

TEST(TokenScoresCudaArgsTest, RejectsHeadDimAbove256) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  HostTensor q(DType::kF32, {1, 320}), k(DType::kF32, {2, 1, 320}), lse(DType::kF32, {1});
  HostTensor score(DType::kF32, {1, 2});
  DeviceTensor d_q(q), d_k(k), d_lse(lse), d_score(score);
  Status status =
      TokenScoresCuda({d_q.cview(), d_k.cview(), d_lse.cview(), 0.0f, d_score.view()}, nullptr);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace millipede
