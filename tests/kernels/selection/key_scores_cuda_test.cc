// KeyScoresCuda against KeyScoresRef: random queries and keys (F32, BF16, F16), head dims from 1
// to 256, GQA groups 1 to 8, key positions shuffled (some after every query), ascending,
// descending, in two ranges far apart or all before the queries, some queries with an lse of -inf,
// partial key tiles, keys aligned (the tensor-core kernel's cp.async path) or 2 bytes off (its load
// path), long key runs that give every block many spans; every score and diagonal score written
// (outputs start as NaN), guard bands checked. Skips without a GPU.
//
// Tolerance: the tensor-core kernel (BF16 / F16 keys, head_dim 64, 128, 256) carries q in two
// 16-bit parts, 16 significant bits with BF16: its worst element is a few 1e-6 of the largest
// score here, which the CUDA-core kernel's 2e-5 bound holds with room to spare (q rounded to
// bf16 alone would miss it by ~100x).
#include "kernels/selection/key_scores_cuda.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/selection/key_scores.h"
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

enum class KeyOrder {
  kShuffled,    // a random subset of [0, n_k + 8)
  kAscending,   // 0, 1, ..., n_k - 1: diagonals gathered in shared memory
  kDescending,  // n_k - 1, ..., 0
  kTwoRanges,   // [0, n_k / 2) and n_k further on: some key tiles straddle the gap
  kEarlier,     // 0, 1, ..., n_k - 1 and every query 40 or more positions later (an earlier
                // shard of the prompt): every key is seen by every query
};

struct Case {
  int64_t n_q, heads, kv_heads, head_dim, n_k;
  DType k_dtype;
  KeyOrder order = KeyOrder::kShuffled;
  bool keys_aligned = false;  // k at cudaMalloc's alignment, else 2 bytes off
};

class KeyScoresCudaTest : public testing::GpuOpTest<Case> {};

// A plausible lse for each (query, head): the true one over the visible keys (computed here in
// double), except every fifth row, which is -inf.
HostTensor MakeLse(const HostTensor& q, const std::vector<int64_t>& q_pos, const HostTensor& k,
                   const std::vector<int64_t>& k_pos) {
  const int64_t n_q = q.shape()[0], heads = q.shape()[1], d = q.shape()[2];
  const int64_t n_k = k.shape()[0], kv_heads = k.shape()[1], group = heads / kv_heads;
  const std::vector<float> qf = testing::ToFloats(q), kf = testing::ToFloats(k);
  HostTensor lse(DType::kF32, {n_q, heads});
  for (int64_t t = 0; t < n_q; ++t)
    for (int64_t h = 0; h < heads; ++h) {
      double sum = 0;
      for (int64_t j = 0; j < n_k; ++j) {
        if (k_pos[j] > q_pos[t]) continue;
        double dot = 0;
        for (int64_t c = 0; c < d; ++c)
          dot += double{qf[(t * heads + h) * d + c]} * kf[(j * kv_heads + h / group) * d + c];
        sum += std::exp(dot / std::sqrt(static_cast<double>(d)));
      }
      const bool empty = sum == 0 || (t * heads + h) % 5 == 4;
      lse.data<float>()[t * heads + h] = empty ? -kInf : static_cast<float>(std::log(sum));
    }
  return lse;
}

// The key positions of `c` and the end of their range (the queries sit just before it).
std::vector<int64_t> KeyPositions(const Case& c, int64_t* end) {
  std::vector<int64_t> k_pos(static_cast<size_t>(c.n_k + 8));
  std::iota(k_pos.begin(), k_pos.end(), 0);
  std::mt19937_64 rng(23);
  if (c.order == KeyOrder::kShuffled) std::shuffle(k_pos.begin(), k_pos.end(), rng);
  k_pos.resize(static_cast<size_t>(c.n_k));
  if (c.order == KeyOrder::kDescending) std::reverse(k_pos.begin(), k_pos.end());
  *end = c.n_k;
  if (c.order == KeyOrder::kTwoRanges) {
    for (int64_t j = c.n_k / 2; j < c.n_k; ++j) k_pos[static_cast<size_t>(j)] += c.n_k;
    *end = 2 * c.n_k;
  }
  if (c.order == KeyOrder::kEarlier) *end = c.n_k + 40 + c.n_q;
  return k_pos;
}

HostTensor Positions(const std::vector<int64_t>& values) {
  HostTensor t(DType::kI64, {static_cast<int64_t>(values.size())});
  std::copy(values.begin(), values.end(), t.data<int64_t>());
  return t;
}

TEST_P(KeyScoresCudaTest, MatchesReference) {
  const Case c = GetParam();
  HostTensor q = RandomTensor(DType::kF32, {c.n_q, c.heads, c.head_dim}, 21, -2.0f, 2.0f);
  HostTensor k = RandomTensor(c.k_dtype, {c.n_k, c.kv_heads, c.head_dim}, 22, -2.0f, 2.0f);
  // Queries at the last n_q positions before the keys' end, so some keys are seen by no query
  // (shuffled) and the earliest queries see fewer keys.
  int64_t end = 0;
  const std::vector<int64_t> k_pos = KeyPositions(c, &end);
  std::vector<int64_t> q_pos;
  for (int64_t t = 0; t < c.n_q; ++t) q_pos.push_back(std::max<int64_t>(0, end - c.n_q + t));

  OpCheck check("key_scores");
  const int iq = check.Input(q);
  const int iq_pos = check.Input(Positions(q_pos));
  const int ik = check.Input(k, c.keys_aligned ? 0 : DTypeSize(c.k_dtype));
  const int ik_pos = check.Input(Positions(k_pos));
  const int ilse = check.Input(MakeLse(q, q_pos, k, k_pos));
  const int iscore =
      check.Output("score", testing::PoisonedF32({c.kv_heads, c.n_k}), Tolerance::Normalised(2e-5));
  // Diagonals up to n_k - 3: the farthest are left out.
  const int64_t n_diag = std::max<int64_t>(c.n_k - 3, 1);
  const int idiag = check.Output("diag_score", testing::PoisonedF32({c.kv_heads, n_diag}),
                                 Tolerance::Normalised(2e-5));
  ASSERT_TRUE(check.Run(
      [&](const OpCheck::Tensors& t) {
        return KeyScoresArgs{t.cview(iq),     t.cview(iq_pos), t.cview(ik),
                             t.cview(ik_pos), t.cview(ilse),   0.0f,
                             t.view(iscore),  t.view(idiag)};
      },
      KeyScoresRef, KeyScoresCuda));
  EXPECT_TRUE(testing::AllFinite(check.actual(iscore)));
  EXPECT_TRUE(testing::AllFinite(check.actual(idiag)));
}

constexpr KeyOrder kShuffled = KeyOrder::kShuffled, kAscending = KeyOrder::kAscending,
                   kDescending = KeyOrder::kDescending, kTwoRanges = KeyOrder::kTwoRanges,
                   kEarlier = KeyOrder::kEarlier;

INSTANTIATE_TEST_SUITE_P(
    Shapes, KeyScoresCudaTest,
    ::testing::Values(Case{8, 32, 8, 128, 5000, DType::kBF16}, Case{1, 4, 4, 64, 33, DType::kF32},
                      Case{3, 6, 2, 40, 100, DType::kF16}, Case{64, 8, 1, 256, 700, DType::kBF16},
                      Case{5, 2, 2, 1, 31, DType::kF32}, Case{0, 4, 2, 64, 50, DType::kBF16},
                      Case{16, 28, 4, 128, 1, DType::kF16},
                      Case{64, 32, 8, 128, 3000, DType::kBF16, kAscending},
                      Case{7, 12, 3, 64, 200, DType::kF16, kAscending},
                      Case{2000, 4, 1, 16, 300, DType::kF32, kAscending},
                      Case{64, 32, 8, 128, 3000, DType::kF8E4M3, kAscending},
                      Case{7, 12, 3, 64, 200, DType::kF8E4M3, kShuffled}));

// The tensor-core kernel: the prefill shape (64 queries, GQA 4, head_dim 128), GQA 1 and 8 (two
// row chunks), head_dim 64 and 256, every key order, aligned and unaligned keys, and a long run
// of keys (hundreds of tiles per block, so many diagonal spans per block).
INSTANTIATE_TEST_SUITE_P(
    TensorCores, KeyScoresCudaTest,
    ::testing::Values(Case{64, 32, 8, 128, 3000, DType::kBF16, kAscending, true},
                      Case{64, 32, 8, 128, 3000, DType::kF16, kShuffled, true},
                      Case{16, 8, 2, 128, 12000, DType::kBF16, kTwoRanges, true},
                      Case{8, 4, 1, 64, 300000, DType::kBF16, kAscending, true},
                      Case{64, 16, 2, 64, 2000, DType::kBF16, kDescending, true},
                      Case{40, 4, 4, 64, 1500, DType::kF16, kAscending, true},
                      Case{24, 16, 2, 256, 900, DType::kBF16, kTwoRanges, true},
                      Case{13, 8, 2, 256, 1000, DType::kF16, kShuffled},
                      Case{33, 12, 4, 128, 777, DType::kBF16, kDescending},
                      Case{64, 32, 8, 128, 2000, DType::kBF16, kEarlier, true},
                      Case{10, 8, 1, 64, 333, DType::kF16, kEarlier}));

TEST(KeyScoresCudaArgsTest, RejectsHeadDimAbove256) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  HostTensor q(DType::kF32, {1, 1, 320}), k(DType::kF32, {2, 1, 320}), lse(DType::kF32, {1, 1});
  HostTensor q_pos = Positions({5}), k_pos = Positions({0, 1}), score(DType::kF32, {1, 2});
  DeviceTensor d_q(q), d_k(k), d_lse(lse), d_q_pos(q_pos), d_k_pos(k_pos), d_score(score);
  Status status = KeyScoresCuda({d_q.cview(),
                                 d_q_pos.cview(),
                                 d_k.cview(),
                                 d_k_pos.cview(),
                                 d_lse.cview(),
                                 0.0f,
                                 d_score.view(),
                                 {}},
                                nullptr);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace millipede
