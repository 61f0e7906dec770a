// BlockSparseIndexRef: hand-computed scores (the best blocks kept, ties to the lower block, the
// diagonal block always kept, later blocks never, empty key blocks skipped, top_blocks beyond
// what exists, heads with top_blocks 0 empty), merging of adjacent blocks, partial tiles, blocks
// larger than a tile, layouts of several runs (absent keys as errors or skipped), the errors.
#include "kernels/sparse_index/block_sparse_index.h"

#include <gtest/gtest.h>

#include <array>
#include <vector>

#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/sparse_index/sparse_index_test_util.h"

namespace millipede {
namespace {

using testing::BuildIndex;
using testing::HostIndex;
using testing::ItemRanges;
using testing::Rows3;
using testing::TensorOf;

using Ranges = std::vector<std::array<int64_t, 3>>;

// One KV head of head_dim 1, so that score(qb, kb) = mean_q[qb] * mean_k[kb].
struct Case {
  HostTensor tiles, runs;
  HostTensor q_sums, q_counts, k_sums, k_counts;
  int64_t block = 64, group = 1;
  std::vector<int64_t> top_blocks{1};
  bool skip_absent = false;
};

Case Make(std::vector<int64_t> tiles, std::vector<float> q_mean, std::vector<float> k_mean,
          std::vector<float> k_counts, int64_t top_blocks, int64_t block = 64) {
  const int64_t nb = static_cast<int64_t>(k_mean.size());
  std::vector<float> q_counts(nb, static_cast<float>(block)), k_sums(nb);
  for (int64_t i = 0; i < nb; ++i) k_sums[i] = k_mean[i] * k_counts[i];
  for (int64_t i = 0; i < nb; ++i) q_mean[i] *= q_counts[i];
  return {Rows3(tiles),
          Rows3({0, nb * block, 0}),
          TensorOf(DType::kF32, {nb, 1, 1}, q_mean),
          TensorOf(DType::kF32, {nb}, q_counts),
          TensorOf(DType::kF32, {nb, 1, 1}, k_sums),
          TensorOf(DType::kF32, {nb}, k_counts),
          block,
          1,
          {top_blocks}};
}

StatusOr<HostIndex> Build(const Case& c) {
  BlockSparseIndexArgs args;
  args.tiles = c.tiles.view();
  args.runs = c.runs.view();
  args.q_sums = c.q_sums.view();
  args.q_counts = c.q_counts.view();
  args.k_sums = c.k_sums.view();
  args.k_counts = c.k_counts.view();
  args.block = c.block;
  args.group = c.group;
  args.top_blocks = c.top_blocks.data();
  args.skip_absent = c.skip_absent;
  return BuildIndex(args, c.q_sums.shape()[1] * c.tiles.shape()[0], BlockSparseIndexRef);
}

TEST(BlockSparseIndexTest, BestEarlierBlocksAndTheDiagonal) {
  // Query block 4 (positions [256, 320)), mean q 1. Key means: block 1 best, 3 second, 0 and 2
  // tied third; block 5 (after the query) best of all but never kept.
  const std::vector<float> k_mean{0.2f, 0.9f, 0.2f, 0.5f, -5.0f, 9.0f};
  const std::vector<float> counts(6, 64.0f);
  auto two = Build(Make({0, 64, 256}, {0, 0, 0, 0, 1, 0}, k_mean, counts, 2));
  ASSERT_TRUE(two.ok()) << two.status().ToString();
  EXPECT_EQ(two->ranges, (Ranges{{64, 128, 64}, {256, 320, 256}}));
  EXPECT_EQ(two->column_offsets, (std::vector<int64_t>{0, 0}));
  // Three: blocks 1 and 3 plus the diagonal; 3 and 4 adjacent, merged.
  auto three = Build(Make({0, 64, 256}, {0, 0, 0, 0, 1, 0}, k_mean, counts, 3));
  ASSERT_TRUE(three.ok());
  EXPECT_EQ(three->ranges, (Ranges{{64, 128, 64}, {192, 320, 192}}));
  // Four: the tie between blocks 0 and 2 goes to block 0.
  auto four = Build(Make({0, 64, 256}, {0, 0, 0, 0, 1, 0}, k_mean, counts, 4));
  ASSERT_TRUE(four.ok());
  EXPECT_EQ(four->ranges, (Ranges{{0, 128, 0}, {192, 320, 192}}));
  // A negative query mean reverses the order: block 0 and 2 tie best, 0 wins.
  auto negative = Build(Make({0, 64, 256}, {0, 0, 0, 0, -1, 0}, k_mean, counts, 2));
  ASSERT_TRUE(negative.ok());
  EXPECT_EQ(negative->ranges, (Ranges{{0, 64, 0}, {256, 320, 256}}));
}

TEST(BlockSparseIndexTest, EmptyKeyBlocksSkippedAndBudgetBeyondWhatExists) {
  // Block 1 would score best but holds no key.
  std::vector<float> counts{64, 0, 64, 64};
  auto skip = Build(Make({0, 64, 192}, {0, 0, 0, 1}, {0.1f, 5.0f, 0.3f, 0.0f}, counts, 2));
  ASSERT_TRUE(skip.ok()) << skip.status().ToString();
  EXPECT_EQ(skip->ranges, (Ranges{{128, 256, 128}}));
  // top_blocks 100 keeps every non-empty earlier block.
  auto all = Build(Make({0, 64, 192}, {0, 0, 0, 1}, {0.1f, 5.0f, 0.3f, 0.0f}, counts, 100));
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->ranges, (Ranges{{0, 64, 0}, {128, 256, 128}}));
  // top_blocks 1: the diagonal only; query block 0 has nothing earlier.
  auto diag =
      Build(Make({0, 64, 192, 64, 128, 0}, {1, 0, 0, 1}, {1, 1, 1, 1}, {64, 64, 64, 64}, 1));
  ASSERT_TRUE(diag.ok());
  EXPECT_EQ(diag->ranges, (Ranges{{192, 256, 192}, {0, 64, 0}}));
}

TEST(BlockSparseIndexTest, PartialTilesAndBlocksOfTwoTiles) {
  // Blocks of 128: tiles [128, 191] and a partial [192, 201] share query block 1; the diagonal
  // range ends at each tile's last position.
  Case c = Make({0, 64, 128, 64, 74, 192}, {0, 1}, {1, 1}, {128, 128}, 2, 128);
  c.runs = Rows3({0, 202, 0});
  auto index = Build(c);
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  EXPECT_EQ(ItemRanges(*index, 0), (Ranges{{0, 192, 0}}));
  EXPECT_EQ(ItemRanges(*index, 1), (Ranges{{0, 202, 0}}));
}

TEST(BlockSparseIndexTest, RangesPlacedByTheLayout) {
  // Blocks 0 and 2 kept for query block 2; positions [0, 100) at rows 50.., [100, 192) at 0..
  Case c = Make({0, 64, 128}, {0, 0, 1}, {1, 0, 0}, {64, 64, 64}, 2);
  c.runs = Rows3({0, 100, 50, 100, 192, 0});
  auto index = Build(c);
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  EXPECT_EQ(index->ranges, (Ranges{{50, 114, 0}, {28, 92, 128}}));
  c.runs = Rows3({0, 50, 0, 100, 192, 50});  // block 0 half absent
  EXPECT_EQ(Build(c).status().code(), StatusCode::kInvalidArgument);
  c.skip_absent = true;
  auto skipped = Build(c);
  ASSERT_TRUE(skipped.ok()) << skipped.status().ToString();
  EXPECT_EQ(skipped->ranges, (Ranges{{0, 50, 0}, {78, 142, 128}}));
}

TEST(BlockSparseIndexTest, GroupsAndHeads) {
  // Two KV heads of dim 2, group 3: head 0 prefers key block 0, head 1 key block 1.
  Case c;
  c.tiles = Rows3({0, 64, 128});
  c.runs = Rows3({0, 192, 0});
  c.q_sums = TensorOf(DType::kF32, {3, 2, 2}, {0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 3});
  c.q_counts = TensorOf(DType::kF32, {3}, {64, 64, 64});
  c.k_sums = TensorOf(DType::kF32, {3, 2, 2}, {64, 0, 0, 0, 0, 0, 0, 64, 0, 0, 0, 0});
  c.k_counts = TensorOf(DType::kF32, {3}, {64, 64, 64});
  c.group = 3;
  c.top_blocks = {2, 2};
  auto index = Build(c);
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  EXPECT_EQ(ItemRanges(*index, 0), (Ranges{{0, 64, 0}, {128, 192, 128}}));
  EXPECT_EQ(ItemRanges(*index, 1), (Ranges{{64, 192, 64}}));
  // Head 0 not block-sparse: its item is empty, head 1's unchanged; no head block-sparse at
  // all needs no query counts.
  c.top_blocks = {0, 2};
  index = Build(c);
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  EXPECT_TRUE(ItemRanges(*index, 0).empty());
  EXPECT_EQ(ItemRanges(*index, 1), (Ranges{{64, 192, 64}}));
  c.top_blocks = {0, 0};
  c.q_counts.data<float>()[2] = 0;
  index = Build(c);
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  EXPECT_EQ(index->range_offsets, (std::vector<int64_t>{0, 0, 0}));
}

TEST(BlockSparseIndexTest, Errors) {
  const std::vector<float> ones(4, 1.0f), counts(4, 64.0f);
  Case zero_q = Make({0, 64, 128}, ones, ones, counts, 2);
  zero_q.q_counts.data<float>()[2] = 0;
  EXPECT_EQ(Build(zero_q).status().code(), StatusCode::kInvalidArgument);
  // Blocks of 32 and a tile of 64 rows: crosses position 160.
  EXPECT_FALSE(Build(Make({0, 64, 128}, ones, ones, counts, 2, 32)).ok());
  // Query block 5 beyond 4 blocks.
  EXPECT_FALSE(Build(Make({0, 64, 320}, ones, ones, counts, 2)).ok());
  EXPECT_FALSE(Build(Make({0, 64, 128}, ones, ones, counts, -1)).ok());
  Case bad_k = Make({0, 64, 128}, ones, ones, counts, 2);
  bad_k.k_counts = TensorOf(DType::kF32, {3}, {64, 64, 64});
  EXPECT_FALSE(Build(bad_k).ok());
}

}  // namespace
}  // namespace millipede
