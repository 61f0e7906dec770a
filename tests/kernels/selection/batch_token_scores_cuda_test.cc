// BatchTokenScoresCuda against BatchTokenScoresRef: entries of different lengths (empty, one key,
// partial blocks, thousands of keys) on the fast path (BF16/F16, head_dim 64/128, GQA 4 and 8)
// and the per-entry path (F32, unaligned keys), more entries than one launch's table, entries
// sharing query rows; the output starts at a finite value so that an unwritten NaN tail fails.
// And each entry's scores equal TokenScoresCuda's of its row, bit for bit. Skips without a GPU.
#include "kernels/selection/batch_token_scores_cuda.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/selection/token_scores_cuda.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/op_harness.h"

namespace millipede {
namespace {

using testing::DeviceTensor;
using testing::HaveGpu;
using testing::OpCheck;
using testing::RandomTensor;
using testing::Tolerance;

struct Case {
  std::vector<int64_t> lengths;
  int64_t heads, kv_heads, head_dim;
  DType k_dtype;
  bool aligned = true;
  int64_t queries = 0;  // 0: one per entry (row e); else rows drawn from [0, queries)
};

class BatchTokenScoresCudaTest : public testing::GpuOpTest<Case> {};

// LSEs in a range that keeps the scores finite, a few heads -inf.
HostTensor MakeLse(int64_t queries, int64_t heads, uint64_t seed) {
  HostTensor lse = RandomTensor(DType::kF32, {queries, heads}, seed, 8.0f, 12.0f);
  for (int64_t i = 0; i < lse.NumElements(); i += 7) lse.data<float>()[i] = -testing::kInf;
  return lse;
}

std::vector<int32_t> Rows(const Case& c) {
  const size_t n = c.lengths.size();
  std::vector<int32_t> rows(n);
  std::mt19937 rng(5);
  for (size_t e = 0; e < n; ++e)
    rows[e] = c.queries == 0 ? static_cast<int32_t>(e) : static_cast<int32_t>(rng() % c.queries);
  return rows;
}

TEST_P(BatchTokenScoresCudaTest, MatchesReference) {
  const Case& c = GetParam();
  const int64_t entries = static_cast<int64_t>(c.lengths.size());
  const int64_t queries = c.queries == 0 ? entries : c.queries;
  int64_t cols = 1;
  for (int64_t n : c.lengths) cols = std::max(cols, n);
  const std::vector<int32_t> rows = Rows(c);
  OpCheck check("batch_token_scores");
  const int iq =
      check.Input(RandomTensor(DType::kF32, {queries, c.heads, c.head_dim}, 31, -2.0f, 2.0f));
  const int ilse = check.Input(MakeLse(queries, c.heads, 32));
  std::vector<int> ks;
  for (int64_t e = 0; e < entries; ++e)
    ks.push_back(check.Input(
        RandomTensor(c.k_dtype, {c.lengths[e], c.kv_heads, c.head_dim}, 100 + e, -2.0f, 2.0f),
        c.aligned ? 0 : DTypeSize(c.k_dtype)));
  HostTensor initial(DType::kF32, {entries, c.kv_heads, cols});
  for (int64_t i = 0; i < initial.NumElements(); ++i) initial.data<float>()[i] = 7.0f;
  const int iscore =
      check.Output("score", initial, Tolerance::Normalised(2e-5).WithNanMatchingNan());
  std::vector<ConstTensorView> k;
  ASSERT_TRUE(check.Run(
      [&](const OpCheck::Tensors& t) {
        k.clear();
        for (int i : ks) k.push_back(t.cview(i));
        return BatchTokenScoresArgs{t.cview(iq), t.cview(ilse), k, rows, 0.0f, t.view(iscore)};
      },
      BatchTokenScoresRef, BatchTokenScoresCuda));
}

// clang-format off
INSTANTIATE_TEST_SUITE_P(
    Shapes, BatchTokenScoresCudaTest,
    ::testing::Values(
        Case{{5000, 0, 1, 130, 4097}, 32, 8, 128, DType::kBF16},
        Case{{700, 64, 2049}, 16, 2, 64, DType::kF16, true, 2},
        Case{{33, 0, 100}, 32, 8, 128, DType::kBF16, false},
        Case{{41, 7, 90}, 6, 2, 40, DType::kF32},
        Case{{5000, 0, 1, 130, 4097}, 32, 8, 128, DType::kF8E4M3},
        Case{std::vector<int64_t>(70, 300), 32, 8, 128, DType::kBF16, true, 9},
        Case{{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24,
              25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45,
              46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 66},
             8, 8, 64, DType::kBF16}));
// clang-format on

// The batched scores are the single op's, bit for bit: the filter layers choose the same rows
// together as alone.
TEST(BatchTokenScoresCudaEqualTest, EachEntryEqualsTokenScoresCuda) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  const int64_t heads = 32, kv_heads = 8, d = 128;
  const std::vector<int64_t> lengths = {3000, 4608, 17};
  const std::vector<int32_t> rows = {1, 0, 1};
  const int64_t entries = 3, cols = 4608;
  HostTensor q = RandomTensor(DType::kF32, {2, heads, d}, 41, -2.0f, 2.0f);
  HostTensor lse = MakeLse(2, heads, 42);
  DeviceTensor d_q(q), d_lse(lse);
  std::vector<std::unique_ptr<DeviceTensor>> d_k;
  std::vector<ConstTensorView> k;
  for (int64_t e = 0; e < entries; ++e) {
    d_k.push_back(std::make_unique<DeviceTensor>(
        RandomTensor(DType::kBF16, {lengths[e], kv_heads, d}, 50 + e, -2.0f, 2.0f)));
    k.push_back(d_k.back()->cview());
  }
  DeviceTensor d_score(HostTensor(DType::kF32, {entries, kv_heads, cols}));
  ASSERT_TRUE(
      BatchTokenScoresCuda({d_q.cview(), d_lse.cview(), k, rows, 0.0f, d_score.view()}, nullptr)
          .ok());
  const HostTensor batched = d_score.Read();
  for (int64_t e = 0; e < entries; ++e) {
    const int64_t n = lengths[e], row = rows[e];
    DeviceTensor one(HostTensor(DType::kF32, {kv_heads, n}));
    const ConstTensorView q_row{static_cast<const float*>(d_q.cview().data) + row * heads * d,
                                DType::kF32, Shape{heads, d}};
    const ConstTensorView lse_row{static_cast<const float*>(d_lse.cview().data) + row * heads,
                                  DType::kF32, Shape{heads}};
    ASSERT_TRUE(TokenScoresCuda({q_row, k[e], lse_row, 0.0f, one.view()}, nullptr).ok());
    const HostTensor alone = one.Read();
    for (int64_t g = 0; g < kv_heads; ++g)
      ASSERT_EQ(std::memcmp(batched.data<float>() + (e * kv_heads + g) * cols,
                            alone.data<float>() + g * n, n * sizeof(float)),
                0)
          << "entry " << e << " head " << g;
  }
}

}  // namespace
}  // namespace millipede
