// TopKKeysCuda and TopKCutCuda against their references, bit for bit, on offers of simulated
// ranks (tests/kernels/selection/top_k_cut_test_util.h): 1-8 ranks, up to 2^20 positions, k up to 4096
// and beyond a shard, ties, NaN and infinities, one row to 32; outputs poisoned and
// guard-banded. Skips without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/selection/top_k_cut_cuda.h"
#include "kernels/selection/top_k_keys_cuda.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/op_harness.h"
#include "tests/kernels/selection/top_k_cut_test_util.h"

namespace millipede {
namespace {

using testing::OpCheck;
using testing::Scores;
using testing::Tolerance;

struct Case {
  int64_t rows, positions, ranks, k;
  Scores scores;
};

class TopKCutCudaTest : public testing::GpuOpTest<Case> {};

HostTensor Poison(DType dtype, const Shape& shape) {
  HostTensor t(dtype, shape);
  std::memset(t.view().data, 0x5c, t.NumBytes());
  return t;
}

TEST_P(TopKCutCudaTest, KeysMatchReference) {
  const Case c = GetParam();
  const HostTensor global = testing::GlobalScores(c.rows, c.positions, c.scores, 5 + c.k);
  for (const testing::RankOffer& o : testing::Offers(global, c.ranks, c.k)) {
    OpCheck check("top_k_keys");
    const int index = check.Input(o.index), value = check.Input(o.value);
    const int keys =
        check.Output("keys", Poison(DType::kI64, {c.rows, c.k}), Tolerance::Bitwise(), 8);
    ASSERT_TRUE(check.Run(
        [&](const OpCheck::Tensors& t) {
          return TopKKeysArgs{t.cview(index), t.cview(value), o.ranges, t.view(keys)};
        },
        TopKKeysRef, TopKKeysCuda));
  }
}

TEST_P(TopKCutCudaTest, CutMatchesReference) {
  const Case c = GetParam();
  const HostTensor global = testing::GlobalScores(c.rows, c.positions, c.scores, 5 + c.k);
  const std::vector<testing::RankOffer> offers = testing::Offers(global, c.ranks, c.k);
  const HostTensor all = testing::Gathered(offers);
  for (int64_t r = 0; r < c.ranks; ++r) {
    const testing::RankOffer& o = offers[static_cast<size_t>(r)];
    const int64_t slots = std::min(c.k, o.columns());
    OpCheck check("top_k_cut");
    const int keys = check.Input(all), index = check.Input(o.index);
    const int chosen =
        check.Output("chosen", Poison(DType::kI32, {c.rows, slots}), Tolerance::Bitwise(), 4);
    ASSERT_TRUE(check.Run(
        [&](const OpCheck::Tensors& t) {
          return TopKCutArgs{t.cview(keys), t.cview(index), r, t.view(chosen)};
        },
        TopKCutRef, TopKCutCuda));
  }
}

// Rows [1, rows) of the gathered block cut in place through the rank stride.
TEST_P(TopKCutCudaTest, StridedRowsMatchReference) {
  const Case c = GetParam();
  if (c.rows < 2) GTEST_SKIP() << "one row";
  const HostTensor global = testing::GlobalScores(c.rows, c.positions, c.scores, 5 + c.k);
  const std::vector<testing::RankOffer> offers = testing::Offers(global, c.ranks, c.k);
  const HostTensor all = testing::Gathered(offers);
  const int64_t count = c.rows - 1;
  for (int64_t r = 0; r < c.ranks; ++r) {
    const testing::RankOffer& o = offers[static_cast<size_t>(r)];
    const int64_t slots = std::min(c.k, o.columns());
    OpCheck check("top_k_cut_strided");
    const int keys = check.Input(all), index = check.Input(o.index);
    const int chosen =
        check.Output("chosen", Poison(DType::kI32, {count, slots}), Tolerance::Bitwise(), 4);
    ASSERT_TRUE(check.Run(
        [&](const OpCheck::Tensors& t) {
          const ConstTensorView all_keys = t.cview(keys), all_index = t.cview(index);
          return TopKCutArgs{
              {static_cast<const int64_t*>(all_keys.data) + c.k, DType::kI64,
               Shape{c.ranks, count, c.k}},
              {static_cast<const int32_t*>(all_index.data) + c.k, DType::kI32, Shape{count, c.k}},
              r,
              t.view(chosen),
              c.rows * c.k};
        },
        TopKCutRef, TopKCutCuda));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, TopKCutCudaTest,
    ::testing::Values(Case{8, 1 << 20, 2, 2048, Scores::kUniform},
                      Case{8, 1 << 18, 4, 4096, Scores::kTies},
                      Case{3, 100000, 3, 1000, Scores::kSpecial},
                      Case{32, 4000, 8, 333, Scores::kTies},
                      Case{2, 50, 5, 12, Scores::kConstant},
                      Case{1, 9, 4, 30, Scores::kUniform},  // k beyond every position
                      Case{2, 3, 4, 2, Scores::kUniform},   // ranks without positions
                      Case{4, 700, 1, 513, Scores::kUniform}));

}  // namespace
}  // namespace millipede
