// BlockSumsRef: a hand-computed case (two runs out of position order, a partial block, an empty
// block, a head group), BF16 input, rows split between two "ranks" summing to the whole, and the
// errors (rows in no run or two runs, positions beyond the blocks, bad group).
#include "kernels/sparse_index/block_sums.h"

#include <gtest/gtest.h>

#include <cstring>
#include <utility>
#include <vector>

#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/sparse_index/sparse_index_test_util.h"

namespace millipede {
namespace {

using testing::PoisonedF32;
using testing::RandomTensor;
using testing::Rows3;
using testing::TensorOf;
using testing::ToFloats;

Status Sums(const HostTensor& x, const HostTensor& runs, int64_t block, int64_t group,
            HostTensor& sums, HostTensor& counts) {
  return BlockSumsRef({x.view(), runs.view(), block, group, sums.view(), counts.view()});
}

TEST(BlockSumsTest, ByHand) {
  // 5 rows of 4 heads x 1 dim; rows 3-4 at positions 0-1, rows 0-2 at positions 3-5. Blocks of
  // 4: block 0 holds positions 0, 1, 3 (rows 3, 4, 0), block 1 positions 4, 5 (rows 1, 2),
  // block 2 nothing. Heads summed in pairs.
  HostTensor x = TensorOf(DType::kF32, {5, 4, 1}, {1,   2,   3,    4,     10, 20, 30, 40, 100, 200,
                                                   300, 400, 0.5f, 0.25f, 0,  0,  -1, -2, -3,  -4});
  HostTensor runs = Rows3({0, 2, 3, 3, 6, 0});
  HostTensor sums = PoisonedF32({3, 2, 1}), counts = PoisonedF32({3});
  ASSERT_TRUE(Sums(x, runs, 4, 2, sums, counts).ok());
  EXPECT_EQ(ToFloats(sums),
            (std::vector<float>{1 + 2 + 0.75f - 3, 3 + 4 - 7, 30 + 300, 70 + 700, 0, 0}));
  EXPECT_EQ(ToFloats(counts), (std::vector<float>{3, 2, 0}));
}

TEST(BlockSumsTest, SplitRowsAddUpToTheWhole) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    const int64_t n = 150, heads = 8, d = 16, block = 64, group = 4;
    HostTensor x = RandomTensor(dtype, {n, heads, d}, 7);
    HostTensor whole = PoisonedF32({3, heads / group, d}), whole_counts = PoisonedF32({3});
    ASSERT_TRUE(Sums(x, Rows3({0, n, 0}), block, group, whole, whole_counts).ok());
    EXPECT_EQ(ToFloats(whole_counts), (std::vector<float>{64, 64, 22}));
    // Rank 0 holds positions [0, 70) and rank 1 [70, 150), each in its own buffer.
    std::vector<float> total(whole.NumElements(), 0.0f), total_counts(3, 0.0f);
    for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 70}, {70, 150}}) {
      HostTensor part(dtype, {end - begin, heads, d});
      const size_t row_bytes = heads * d * DTypeSize(dtype);
      std::memcpy(part.view().data, static_cast<const char*>(x.view().data) + begin * row_bytes,
                  (end - begin) * row_bytes);
      HostTensor sums = PoisonedF32({3, heads / group, d}), counts = PoisonedF32({3});
      ASSERT_TRUE(Sums(part, Rows3({begin, end, 0}), block, group, sums, counts).ok());
      for (int64_t i = 0; i < sums.NumElements(); ++i) total[i] += sums.data<float>()[i];
      for (int i = 0; i < 3; ++i) total_counts[i] += counts.data<float>()[i];
    }
    EXPECT_TRUE(testing::AllClose(total, ToFloats(whole), 1e-5, 1e-5)) << DTypeName(dtype);
    EXPECT_EQ(total_counts, ToFloats(whole_counts));
    // Spot check one element from the definition: block 1, head group 1, dim 3.
    double want = 0;
    for (int64_t r = 64; r < 128; ++r)
      for (int64_t h = 4; h < 8; ++h)
        want += LoadAsFloat(x.view().data, dtype, (r * heads + h) * d + 3);
    EXPECT_NEAR(whole.data<float>()[(1 * 2 + 1) * d + 3], want, 1e-4);
  }
}

TEST(BlockSumsTest, Errors) {
  HostTensor x = RandomTensor(DType::kF32, {10, 2, 3}, 8);
  HostTensor sums = PoisonedF32({2, 2, 3}), counts = PoisonedF32({2});
  EXPECT_TRUE(Sums(x, Rows3({0, 10, 0}), 8, 1, sums, counts).ok());
  EXPECT_FALSE(Sums(x, Rows3({0, 9, 0}), 8, 1, sums, counts).ok());              // row 9 in no run
  EXPECT_FALSE(Sums(x, Rows3({0, 10, 0, 20, 21, 9}), 8, 1, sums, counts).ok());  // row 9 twice
  EXPECT_FALSE(Sums(x, Rows3({10, 20, 0}), 8, 1, sums, counts).ok());            // positions >= 16
  EXPECT_FALSE(Sums(x, Rows3({5, 10, 5, 0, 5, 0}), 8, 1, sums, counts).ok());    // not sorted
  EXPECT_FALSE(Sums(x, Rows3({0, 10, 0}), 0, 1, sums, counts).ok());
  EXPECT_FALSE(Sums(x, Rows3({0, 10, 0}), 8, 3, sums, counts).ok());  // 3 does not divide 2
  HostTensor wide = PoisonedF32({2, 1, 3});
  EXPECT_FALSE(Sums(x, Rows3({0, 10, 0}), 8, 1, wide, counts).ok());  // group 1 needs 2 heads
  HostTensor x64 = RandomTensor(DType::kF64, {10, 2, 3}, 8);
  EXPECT_FALSE(Sums(x64, Rows3({0, 10, 0}), 8, 1, sums, counts).ok());
}

}  // namespace
}  // namespace millipede
