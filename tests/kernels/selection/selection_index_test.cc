// SelectionIndexRef: by hand; against an oracle that gathers the chosen rows per head from an
// explicit mask and compares them with what the index picks; bad entries and shapes.
#include "kernels/selection/selection_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "tests/kernels/kernel_test_util.h"

namespace millipede {
namespace {

using testing::CView;

struct Out {
  std::vector<int64_t> index;
  std::vector<int32_t> counts;
};

StatusOr<Out> BuildIndex(const std::vector<int32_t>& chosen, int64_t kv_heads, int64_t rows,
                  int64_t blocks, int64_t block_stride) {
  const int64_t slots = static_cast<int64_t>(chosen.size()) / kv_heads;
  HostTensor c(DType::kI32, {kv_heads, slots}), index(DType::kI64, {blocks, slots * kv_heads}),
      counts(DType::kI32, {kv_heads});
  std::copy(chosen.begin(), chosen.end(), c.data<int32_t>());
  std::fill_n(index.data<int64_t>(), index.NumElements(), int64_t{-77});
  std::fill_n(counts.data<int32_t>(), counts.NumElements(), -77);
  MP_RETURN_IF_ERROR(
      SelectionIndexRef({CView(c), rows, block_stride, index.view(), counts.view()}));
  return Out{{index.data<int64_t>(), index.data<int64_t>() + index.NumElements()},
             {counts.data<int32_t>(), counts.data<int32_t>() + counts.NumElements()}};
}

TEST(SelectionIndexTest, ByHand) {
  // Two heads over 5 rows, 3 slots; head 1 chose two rows. Two blocks 100 source rows apart.
  auto r = BuildIndex({0, 2, 4,  //
                1, 3, -1},
               2, 5, 2, 100);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // Slot i of head g: row * 2 + g; the padding slot repeats row 0 of head 1.
  EXPECT_EQ(r->index, (std::vector<int64_t>{0, 3, 4, 7, 8, 1,  //
                                            100, 103, 104, 107, 108, 101}));
  EXPECT_EQ(r->counts, (std::vector<int32_t>{3, 2}));
}

// Against the mask: for random selections, gathering a tagged source through the index gives,
// per head, exactly the chosen rows in order, then padding from the head's own rows of the block.
TEST(SelectionIndexTest, GathersEveryChosenRowOfItsHead) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t kv_heads = 1 + static_cast<int64_t>(rng() % 8), rows = 1 + rng() % 300;
    const int64_t slots = static_cast<int64_t>(rng() % (rows + 1)), blocks = 1 + rng() % 4;
    const int64_t stride = rows * kv_heads + static_cast<int64_t>(rng() % 5);
    std::vector<std::vector<bool>> mask(kv_heads, std::vector<bool>(rows, false));
    std::vector<int32_t> chosen;
    for (int64_t g = 0; g < kv_heads; ++g) {
      const int64_t n = static_cast<int64_t>(rng() % (slots + 1));
      std::vector<int32_t> all(rows);
      for (int64_t j = 0; j < rows; ++j) all[j] = static_cast<int32_t>(j);
      std::shuffle(all.begin(), all.end(), rng);
      std::sort(all.begin(), all.begin() + n);
      for (int64_t i = 0; i < slots; ++i) chosen.push_back(i < n ? all[i] : -1);
      for (int64_t i = 0; i < n; ++i) mask[g][all[i]] = true;
    }
    auto r = BuildIndex(chosen, kv_heads, rows, blocks, stride);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (int64_t g = 0; g < kv_heads; ++g) {
      const int64_t n = r->counts[g];
      std::vector<int64_t> want;
      for (int64_t j = 0; j < rows; ++j)
        if (mask[g][j]) want.push_back(j);
      ASSERT_EQ(n, static_cast<int64_t>(want.size())) << "head " << g;
      for (int64_t b = 0; b < blocks; ++b)
        for (int64_t i = 0; i < slots; ++i) {
          const int64_t source = r->index[b * slots * kv_heads + i * kv_heads + g];
          const int64_t in_block = source - b * stride;
          ASSERT_EQ(in_block % kv_heads, g) << "another head's row";
          ASSERT_TRUE(in_block >= 0 && in_block < rows * kv_heads);
          if (i < n) {
            EXPECT_EQ(in_block / kv_heads, want[i]) << "head " << g << " slot " << i;
          }
        }
    }
  }
}

TEST(SelectionIndexTest, EmptyAndBadInputs) {
  auto none = BuildIndex({}, 3, 0, 1, 0);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(none->counts, (std::vector<int32_t>{0, 0, 0}));
  EXPECT_EQ(BuildIndex({0, 5}, 1, 5, 1, 5).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(BuildIndex({0, -2}, 1, 5, 1, 5).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(BuildIndex({-1, 3}, 1, 5, 1, 5).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(BuildIndex({0, 1}, 1, 0, 1, 5).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(BuildIndex({0, 1}, 1, 5, 2, 4).status().code(), StatusCode::kInvalidArgument);
  HostTensor c(DType::kI32, {2, 3}), index(DType::kI64, {1, 5}), counts(DType::kI32, {2});
  EXPECT_EQ(SelectionIndexRef({CView(c), 4, 8, index.view(), counts.view()}).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace millipede
