// BlockMaskIndexRef: ranges of the kept blocks (adjacent ones merged, the diagonal block cut at
// the tile's last position, bits after the query block ignored), a window of query blocks
// (qb_begin), heads the bitmaps do not serve, partial tiles, blocks smaller and larger than a
// tile, layouts of several runs (absent keys as errors or skipped), against the explicit mask of
// random bitmaps, and the errors.
#include "kernels/sparse_index/block_mask_index.h"

#include <gtest/gtest.h>

#include <array>
#include <random>
#include <vector>

#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/sparse_index/sparse_index_test_util.h"

namespace millipede {
namespace {

using testing::BuildIndex;
using testing::HostIndex;
using testing::ItemRanges;
using testing::Rows3;

using Ranges = std::vector<std::array<int64_t, 3>>;

struct Case {
  HostTensor tiles, runs, kept;
  int64_t qb_begin = 0, block = 16;
  std::vector<int64_t> heads{1};
  bool skip_absent = false;
};

HostTensor Bitmaps(int64_t kv_heads, int64_t n_qb, int64_t words,
                   const std::vector<uint32_t>& values) {
  HostTensor t(DType::kI32, {kv_heads, n_qb, words});
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.NumElements());
  for (size_t i = 0; i < values.size(); ++i)
    reinterpret_cast<uint32_t*>(t.data<int32_t>())[i] = values[i];
  return t;
}

StatusOr<HostIndex> Build(const Case& c) {
  BlockMaskIndexArgs args;
  args.tiles = testing::CView(c.tiles);
  args.runs = testing::CView(c.runs);
  args.kept = testing::CView(c.kept);
  args.qb_begin = c.qb_begin;
  args.block = c.block;
  args.heads = c.heads.data();
  args.skip_absent = c.skip_absent;
  return BuildIndex(args, c.kept.shape()[0] * c.tiles.shape()[0], BlockMaskIndexRef);
}

TEST(BlockMaskIndexTest, KeptBlocksAsMergedRanges) {
  // Query block 5 of 16 positions: blocks 0, 2, 3 and 5 kept (bits after 5 ignored); tile rows
  // [0, 10) at positions [80, 90).
  Case c{Rows3({0, 10, 80}), Rows3({0, 200, 0}), Bitmaps(1, 6, 1, {0, 0, 0, 0, 0, 0b11101101u})};
  auto index = Build(c);
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  EXPECT_EQ(index->ranges, (Ranges{{0, 16, 0}, {32, 64, 32}, {80, 90, 80}}));
  EXPECT_EQ(index->column_offsets, (std::vector<int64_t>{0, 0}));
  // The same bitmap row read through a window starting at query block 5.
  c.kept = Bitmaps(1, 1, 1, {0b11101101u});
  c.qb_begin = 5;
  auto window = Build(c);
  ASSERT_TRUE(window.ok());
  EXPECT_EQ(window->ranges, index->ranges);
}

TEST(BlockMaskIndexTest, HeadsBlocksLargerThanTilesAndSeveralRuns) {
  // Block 128, two tiles of query block 1 (positions [128, 192) and [192, 200)); head 0 keeps
  // blocks 0 and 1, head 1 is not served. Keys: [0, 100) at rows 100.., [100, 200) at rows 0...
  Case c{Rows3({0, 64, 128, 64, 72, 192}), Rows3({0, 100, 100, 100, 200, 0}),
         Bitmaps(2, 2, 1, {1u, 0b11u, 0u, 0b11u})};
  c.block = 128;
  c.heads = {1, 0};
  auto index = Build(c);
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  EXPECT_EQ(ItemRanges(*index, 0), (Ranges{{100, 200, 0}, {0, 92, 100}}));
  EXPECT_EQ(ItemRanges(*index, 1), (Ranges{{100, 200, 0}, {0, 100, 100}}));
  EXPECT_TRUE(ItemRanges(*index, 2).empty());
  EXPECT_TRUE(ItemRanges(*index, 3).empty());
  // A gap in the keys: an error, or skipped.
  c.runs = Rows3({0, 50, 0, 100, 200, 50});
  auto gap = Build(c);
  EXPECT_EQ(gap.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(gap.status().message().find("key position 50 is not in the key layout"),
            std::string::npos)
      << gap.status().ToString();
  c.skip_absent = true;
  auto skipped = Build(c);
  ASSERT_TRUE(skipped.ok());
  EXPECT_EQ(ItemRanges(*skipped, 0), (Ranges{{0, 50, 0}, {50, 142, 100}}));
}

TEST(BlockMaskIndexTest, RandomBitmapsGiveTheirExplicitMask) {
  std::mt19937_64 rng(5);
  const int64_t block = 32, n_qb = 40, words = 2, heads = 3, n = n_qb * block - 7;
  std::vector<uint32_t> bits(static_cast<size_t>(heads * n_qb * words));
  for (uint32_t& w : bits) w = static_cast<uint32_t>(rng());
  Case c{Rows3({}), Rows3({0, n, 0}), Bitmaps(heads, n_qb, words, bits)};
  c.block = block;
  c.heads = {1, 1, 1};
  std::vector<int64_t> tiles;
  for (int64_t pos = 0; pos < n; pos += block)
    tiles.insert(tiles.end(), {pos, std::min(pos + block, n), pos});
  c.tiles = Rows3(tiles);
  auto index = Build(c);
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  const int64_t n_tiles = c.tiles.shape()[0];
  for (int64_t g = 0; g < heads; ++g)
    for (int64_t t = 0; t < n_tiles; ++t) {
      const int64_t qb = t, last = std::min((qb + 1) * block, n) - 1;
      std::vector<int64_t> want, got;
      for (int64_t kb = 0; kb <= qb; ++kb)
        if ((bits[(g * n_qb + qb) * words + kb / 32] >> (kb % 32)) & 1u)
          for (int64_t p = kb * block; p < std::min((kb + 1) * block, last + 1); ++p)
            want.push_back(p);
      for (const auto& r : ItemRanges(*index, g * n_tiles + t))
        for (int64_t p = r[2]; p < r[2] + r[1] - r[0]; ++p) got.push_back(p);
      EXPECT_EQ(got, want) << "head " << g << " tile " << t;
    }
}

TEST(BlockMaskIndexTest, Errors) {
  Case crossing{Rows3({0, 10, 10}), Rows3({0, 64, 0}), Bitmaps(1, 4, 1, {1, 1, 1, 1})};
  auto s = Build(crossing);
  EXPECT_NE(s.status().message().find("crosses a multiple of block 16"), std::string::npos)
      << s.status().ToString();
  Case outside{Rows3({0, 4, 80}), Rows3({0, 96, 0}), Bitmaps(1, 4, 1, {1, 1, 1, 1})};
  s = Build(outside);
  EXPECT_NE(s.status().message().find("outside the bitmaps' blocks [0, 4)"), std::string::npos)
      << s.status().ToString();
  Case narrow{Rows3({0, 4, 16}), Rows3({0, 96, 0}),
              Bitmaps(1, 40, 1, std::vector<uint32_t>(40, 1))};
  s = Build(narrow);
  EXPECT_NE(s.status().message().find("needs 2 bitmap words"), std::string::npos)
      << s.status().ToString();
  Case wrong_type{Rows3({0, 4, 16}), Rows3({0, 96, 0}), HostTensor(DType::kI64, {1, 4, 1})};
  s = Build(wrong_type);
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace millipede
