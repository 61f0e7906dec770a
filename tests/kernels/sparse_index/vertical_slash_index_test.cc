// VerticalSlashIndexRef: hand-computed cases for each rule (a head selecting nothing has empty
// items, bands merged when they overlap or touch, bands clipped at position 0 or skipped, columns
// inside a band or after the tile dropped, ranges split at run boundaries, missing positions as
// errors or skipped, -1 padding), the item order of heads and tiles, and random cases against
// the mask written from the definition.
#include "kernels/sparse_index/vertical_slash_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/sparse_index/sparse_index_test_util.h"

namespace millipede {
namespace {

using testing::BuildIndex;
using testing::HostIndex;
using testing::I64Tensor;
using testing::ItemColumns;
using testing::ItemRanges;
using testing::Rows3;

using Ranges = std::vector<std::array<int64_t, 3>>;
using Columns = std::vector<std::array<int64_t, 2>>;

struct Case {
  HostTensor tiles, runs, columns, diagonals;
};

StatusOr<HostIndex> Build(const Case& c, bool skip_absent = false) {
  VerticalSlashIndexArgs args;
  args.skip_absent = skip_absent;
  args.tiles = c.tiles.view();
  args.runs = c.runs.view();
  args.columns = c.columns.view();
  args.diagonals = c.diagonals.view();
  return BuildIndex(args, c.columns.shape()[0] * c.tiles.shape()[0], VerticalSlashIndexRef);
}

// One KV head, one tile, keys at rows = positions [0, 1000).
Case OneTile(int64_t pos, int64_t rows, std::vector<int64_t> columns,
             std::vector<int64_t> diagonals) {
  const int64_t n_v = static_cast<int64_t>(columns.size());
  const int64_t n_s = static_cast<int64_t>(diagonals.size());
  return {Rows3({0, rows, pos}), Rows3({0, 1000, 0}), I64Tensor({1, n_v}, columns),
          I64Tensor({1, n_s}, diagonals)};
}

TEST(VerticalSlashIndexTest, NothingSelectedGivesEmptyItems) {
  for (auto [columns, diagonals] :
       {std::pair<std::vector<int64_t>, std::vector<int64_t>>{{}, {}}, {{-1, -1}, {-1}}}) {
    auto index = Build(OneTile(128, 64, columns, diagonals));
    ASSERT_TRUE(index.ok()) << index.status().ToString();
    EXPECT_EQ(index->range_offsets, (std::vector<int64_t>{0, 0}));
    EXPECT_EQ(index->column_offsets, (std::vector<int64_t>{0, 0}));
  }
}

TEST(VerticalSlashIndexTest, DiagonalZeroIsTheTile) {
  auto index = Build(OneTile(128, 64, {}, {0}));
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  EXPECT_EQ(index->ranges, (Ranges{{128, 192, 128}}));
  EXPECT_TRUE(index->columns.empty());
  EXPECT_EQ(index->range_offsets, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(index->column_offsets, (std::vector<int64_t>{0, 0}));
}

TEST(VerticalSlashIndexTest, BandsMergeWhenTouchingNotWhenApart) {
  // Tile [128, 191]: d = 64 gives [64, 127], touching d = 0's [128, 191]; d = 65 gives
  // [63, 126], one position short.
  auto touching = Build(OneTile(128, 64, {}, {0, 64}));
  ASSERT_TRUE(touching.ok()) << touching.status().ToString();
  EXPECT_EQ(touching->ranges, (Ranges{{64, 192, 64}}));
  auto apart = Build(OneTile(128, 64, {}, {0, 65}));
  ASSERT_TRUE(apart.ok());
  EXPECT_EQ(apart->ranges, (Ranges{{63, 127, 63}, {128, 192, 128}}));
  // Overlapping bands of three diagonals become one: [58, 121] u [118, 181] u [128, 191].
  auto overlapping = Build(OneTile(128, 64, {}, {0, 10, 70, -1}));
  ASSERT_TRUE(overlapping.ok());
  EXPECT_EQ(overlapping->ranges, (Ranges{{58, 192, 58}}));
  // Without diagonal 0: [58, 121] u [118, 181] only.
  overlapping = Build(OneTile(128, 64, {}, {10, 70}));
  ASSERT_TRUE(overlapping.ok());
  EXPECT_EQ(overlapping->ranges, (Ranges{{58, 182, 58}}));
}

TEST(VerticalSlashIndexTest, BandsClippedAtZeroOrSkipped) {
  // Tile [0, 63]: d = 10 gives [0, 53] (clipped), d = 70 lies wholly before position 0.
  auto index = Build(OneTile(0, 64, {}, {0, 10, 70}));
  ASSERT_TRUE(index.ok());
  EXPECT_EQ(index->ranges, (Ranges{{0, 64, 0}}));
  // A partial tile [100, 109] of the block [64, 127]: bands are the block's, cut at the tile's
  // last key: d = 0 gives [64, 109], d = 105 gives [0, 22] (clipped), d = 200 nothing.
  auto partial = Build(OneTile(100, 10, {}, {0, 105, 200}));
  ASSERT_TRUE(partial.ok());
  EXPECT_EQ(partial->ranges, (Ranges{{0, 23, 0}, {64, 110, 64}}));
}

TEST(VerticalSlashIndexTest, ColumnsInsideBandsOrAfterTheTileDropped) {
  // Tile [128, 191], bands [28, 91] (d = 100) and [128, 191]: column 5 and 100 stay, 28, 91
  // and 150 are inside a band, 191 is the tile's own last key, 192 and 500 come after it.
  auto index = Build(OneTile(128, 64, {5, 28, 91, 100, 150, 191, 192, 500, -1}, {0, 100, -1}));
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  EXPECT_EQ(index->ranges, (Ranges{{28, 92, 28}, {128, 192, 128}}));
  EXPECT_EQ(index->columns, (Columns{{5, 5}, {100, 100}}));
}

TEST(VerticalSlashIndexTest, RangesSplitAtRunsAndRowsFollowTheLayout) {
  // Positions [0, 100) at rows 0.., [100, 150) at rows 300.., [150, 400) at rows 100..: the band
  // [58, 191] spans three runs; column 20 sits in the first run.
  Case c = OneTile(128, 64, {20}, {0, 10, 70});
  c.runs = Rows3({0, 100, 0, 100, 150, 300, 150, 400, 100});
  auto index = Build(c);
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  EXPECT_EQ(index->ranges, (Ranges{{58, 100, 58}, {300, 350, 100}, {100, 142, 150}}));
  EXPECT_EQ(index->columns, (Columns{{20, 20}}));
}

TEST(VerticalSlashIndexTest, MissingPositionsAreErrors) {
  // A gap [100, 110) under the band [58, 191].
  Case c = OneTile(128, 64, {}, {0, 10, 70});
  c.runs = Rows3({0, 100, 0, 110, 400, 100});
  auto index = Build(c);
  EXPECT_EQ(index.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(index.status().message().find("position 100"), std::string::npos)
      << index.status().ToString();
  // A column in the gap; the same column with no gap is fine.
  Case col = OneTile(128, 64, {105}, {});
  col.runs = Rows3({0, 100, 0, 110, 400, 100});
  EXPECT_EQ(Build(col).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Build(OneTile(128, 64, {105}, {})).ok());
  // The tile's own keys missing.
  Case own = OneTile(128, 64, {}, {0});
  own.runs = Rows3({0, 150, 0});
  EXPECT_EQ(Build(own).status().code(), StatusCode::kInvalidArgument);
}

TEST(VerticalSlashIndexTest, SelectionPaddingAndOrder) {
  for (const auto& bad :
       std::vector<std::vector<int64_t>>{{5, -1, 7}, {7, 5}, {5, 5}, {-2}, {-1, 3}}) {
    EXPECT_EQ(Build(OneTile(128, 64, bad, {})).status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(Build(OneTile(128, 64, {}, bad)).status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(VerticalSlashIndexTest, BadTilesAndShapes) {
  EXPECT_FALSE(Build(OneTile(120, 16, {}, {})).ok());  // crosses position 128
  EXPECT_FALSE(Build(OneTile(128, 0, {}, {})).ok());
  EXPECT_FALSE(Build(OneTile(128, 65, {}, {})).ok());
  EXPECT_FALSE(Build(OneTile(-64, 64, {}, {})).ok());
  Case heads = OneTile(128, 64, {}, {});
  heads.diagonals = I64Tensor({2, 1}, {-1, -1});  // two heads of diagonals, one of columns
  EXPECT_FALSE(Build(heads).ok());
  Case runs = OneTile(128, 64, {}, {});
  runs.runs = Rows3({100, 400, 0, 0, 100, 300});  // not sorted by position
  EXPECT_FALSE(Build(runs).ok());
}

TEST(VerticalSlashIndexTest, FillPassRefusesWrongSizes) {
  Case c = OneTile(128, 64, {5}, {0, 100});
  HostTensor range_offsets(DType::kI64, {2}), column_offsets(DType::kI64, {2});
  HostTensor ranges(DType::kI64, {3, 3}), columns(DType::kI64, {1, 2});
  VerticalSlashIndexArgs args;
  args.tiles = testing::CView(c.tiles);
  args.runs = testing::CView(c.runs);
  args.columns = testing::CView(c.columns);
  args.diagonals = testing::CView(c.diagonals);
  args.out = {range_offsets.view(), ranges.view(), column_offsets.view(), columns.view()};
  EXPECT_EQ(VerticalSlashIndexRef(args).code(), StatusCode::kInvalidArgument);  // 2 ranges
}

TEST(VerticalSlashIndexTest, SkipAbsentLeavesOutWhatNoRunHolds) {
  // The buffer holds positions [55, 100) and [110, 140) (and an empty run): of the band
  // [58, 191], [58, 100) and [110, 140) remain; column 5 is absent, 55 is kept, 105 is inside
  // the band (absent or not).
  Case c = OneTile(128, 64, {5, 55, 105}, {0, 10, 70});
  c.runs = Rows3({55, 100, 0, 110, 140, 45, 150, 150, 75});
  EXPECT_EQ(Build(c).status().code(), StatusCode::kInvalidArgument);
  auto index = Build(c, true);
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  EXPECT_EQ(index->ranges, (Ranges{{3, 45, 58}, {45, 75, 110}}));
  EXPECT_EQ(index->columns, (Columns{{0, 55}}));
}

TEST(VerticalSlashIndexTest, ItemsAreHeadMajorOverTiles) {
  // Three KV heads (the last selects nothing), two tiles ([0, 63] and a partial [64, 69]).
  Case c{Rows3({0, 64, 0, 64, 70, 64}), Rows3({0, 70, 0}),
         I64Tensor({3, 2}, {3, -1, 66, 69, -1, -1}), I64Tensor({3, 2}, {0, -1, 0, 60, -1, -1})};
  auto index = Build(c);
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  ASSERT_EQ(index->items(), 6);
  EXPECT_EQ(index->range_offsets[6], index->range_offsets[4]);
  EXPECT_EQ(index->column_offsets[6], index->column_offsets[4]);
  EXPECT_EQ(ItemRanges(*index, 0), (Ranges{{0, 64, 0}}));
  EXPECT_EQ(ItemRanges(*index, 1), (Ranges{{64, 70, 64}}));
  EXPECT_TRUE(ItemColumns(*index, 0).empty());  // 3 inside the tile
  EXPECT_EQ(ItemColumns(*index, 1), (Columns{{3, 3}}));
  EXPECT_EQ(ItemRanges(*index, 2), (Ranges{{0, 64, 0}}));  // d = 60's [0, 3] is inside
  EXPECT_EQ(ItemRanges(*index, 3), (Ranges{{4, 70, 4}}));  // d = 60: the block's [4, 67]
  EXPECT_TRUE(ItemColumns(*index, 2).empty());
  EXPECT_TRUE(ItemColumns(*index, 3).empty());  // 66 and 69 inside the tile's own band
}

// Random selections and layouts against the mask written from the definition: key p is selected
// for tile [a, b] of the query block [A, A + 63] iff p <= b and (A <= p + d <= A + 63 for some
// selected d, or p is a selected column).
TEST(VerticalSlashIndexTest, RandomCasesMatchTheDefinition) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t n_pos = 1 + rng() % 700, kv_heads = 1 + rng() % 3;
    const int64_t n_v = rng() % 40, n_s = rng() % 20;
    // Tiles: every 64-block, some cut to a random part.
    std::vector<int64_t> tiles;
    for (int64_t a = 0; a < n_pos; a += kSparseTileRows) {
      int64_t begin = a, end = std::min(n_pos, a + kSparseTileRows);
      if (rng() % 3 == 0) begin += rng() % (end - begin);
      tiles.insert(tiles.end(), {begin - a / 2, end - a / 2, begin});  // rows need not be positions
    }
    // Runs: [0, n_pos) cut at random points, placed in shuffled row order.
    std::vector<int64_t> cuts{0, n_pos};
    for (int i = 0; i < 4; ++i) cuts.push_back(rng() % n_pos);
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    std::vector<size_t> order(cuts.size() - 1);
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<int64_t> row_of_run(order.size()), runs;
    int64_t row = 5;
    for (size_t i : order) {
      row_of_run[i] = row;
      row += cuts[i + 1] - cuts[i];
    }
    for (size_t i = 0; i + 1 < cuts.size(); ++i)
      runs.insert(runs.end(), {cuts[i], cuts[i + 1], row_of_run[i]});
    auto row_of = [&](int64_t p) {
      const size_t i = std::upper_bound(cuts.begin(), cuts.end(), p) - cuts.begin() - 1;
      return row_of_run[i] + p - cuts[i];
    };
    auto select = [&](int64_t n, int64_t limit) {
      std::vector<int64_t> all(static_cast<size_t>(limit));
      for (int64_t i = 0; i < limit; ++i) all[i] = i;
      std::shuffle(all.begin(), all.end(), rng);
      const int64_t used = std::min<int64_t>(n, rng() % (n + 1));
      std::vector<int64_t> picked(all.begin(), all.begin() + std::min(used, limit));
      std::sort(picked.begin(), picked.end());
      picked.resize(n, -1);
      return picked;
    };
    std::vector<int64_t> columns, diagonals;
    for (int64_t g = 0; g < kv_heads; ++g) {
      auto c = select(n_v, n_pos), d = select(n_s, n_pos + 50);
      columns.insert(columns.end(), c.begin(), c.end());
      diagonals.insert(diagonals.end(), d.begin(), d.end());
    }
    const int64_t n_tiles = static_cast<int64_t>(tiles.size() / 3);
    Case c{Rows3(tiles), Rows3(runs), I64Tensor({kv_heads, n_v}, columns),
           I64Tensor({kv_heads, n_s}, diagonals)};
    auto index = Build(c);
    ASSERT_TRUE(index.ok()) << index.status().ToString();
    for (int64_t g = 0; g < kv_heads; ++g)
      for (int64_t t = 0; t < n_tiles; ++t) {
        const int64_t a = tiles[3 * t + 2], b = a + tiles[3 * t + 1] - tiles[3 * t] - 1;
        std::set<int64_t> want;
        for (int64_t p = 0; p <= b; ++p) {
          bool on = false;
          for (int64_t i = 0; i < n_s; ++i) {
            const int64_t d = diagonals[g * n_s + i];
            const int64_t block = a / kSparseTileRows * kSparseTileRows;
            on = on || (d >= 0 && block <= p + d && p + d < block + kSparseTileRows);
          }
          for (int64_t i = 0; i < n_v; ++i) on = on || columns[g * n_v + i] == p;
          if (on) want.insert(p);
        }
        EXPECT_EQ(testing::ItemPositions(*index, g * n_tiles + t, row_of), want)
            << "trial " << trial << " head " << g << " tile " << t;
      }
  }
}

}  // namespace
}  // namespace millipede
