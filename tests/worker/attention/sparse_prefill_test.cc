// The host-side pieces of sparse prefill: query tiles, the positions a vertical-slash selection
// needs, the range arithmetic of the fetch, and the closed forms of the attended pairs.
#include "worker/attention/sparse_prefill.h"

#include <gtest/gtest.h>

#include <set>

#include "worker/attention/attended_pairs.h"
#include "worker/attention/patterns/vertical_slash_pattern.h"

namespace millipede {
namespace {

std::vector<int64_t> Flatten(const std::vector<TokenRange>& r) {
  std::vector<int64_t> out;
  for (const TokenRange& x : r) out.insert(out.end(), {x.begin, x.end});
  return out;
}

TEST(SparseQueryTilesTest, CutsRunsAtGridMultiples) {
  const std::vector<TokenRange> ranges = {{5, 70}, {128, 130}, {200, 264}};
  EXPECT_EQ(SparseQueryTiles(ranges, 64),
            (std::vector<int64_t>{0, 59, 5, 59, 65, 64, 65, 67, 128, 67, 123, 200, 123, 131, 256}));
  EXPECT_EQ(SparseQueryTiles(ranges, 16).size() % 3, 0u);
  EXPECT_TRUE(SparseQueryTiles({}, 64).empty());
}

TEST(VerticalSlashNeedsTest, ColumnsBeforeTheLastQueryAndBlockBands) {
  const std::vector<TokenRange> q = {{100, 110}, {300, 305}};
  // Columns 3 and 400 (after every query: not needed); diagonals 0, 2 and 290. The bands start
  // from the query blocks' first positions (64 and 256) and end at each run's last query.
  const std::vector<int64_t> columns = {3, 400, -1}, diagonals = {0, 2, 290, -1};
  EXPECT_EQ(Flatten(VerticalSlashNeeds(q, columns, diagonals)),
            (std::vector<int64_t>{0, 30, 62, 110, 254, 305}));
  // A diagonal beyond every query needs nothing; an empty selection needs nothing.
  EXPECT_TRUE(VerticalSlashNeeds(q, {}, std::vector<int64_t>{1000}).empty());
  EXPECT_TRUE(VerticalSlashNeeds({}, columns, diagonals).empty());
}

TEST(VerticalSlashNeedsTest, MatchesABruteForceOverRandomSelections) {
  uint32_t seed = 7;
  auto next = [&](int64_t n) {
    seed = seed * 1103515245u + 12345u;
    return static_cast<int64_t>((seed >> 8) % static_cast<uint32_t>(n));
  };
  for (int trial = 0; trial < 50; ++trial) {
    const int64_t first = next(50);
    std::vector<TokenRange> qr = {{first, first + 1 + next(40)}};
    qr.push_back({qr[0].end + next(30) + 1, 0});
    qr[1].end = qr[1].begin + 1 + next(40);
    std::set<int64_t> cs, ds;
    for (int i = 0; i < 5; ++i) cs.insert(next(200));
    for (int i = 0; i < 5; ++i) ds.insert(next(150));
    const std::vector<int64_t> columns(cs.begin(), cs.end()), diagonals(ds.begin(), ds.end());
    // The definition: each query's tile sees, per diagonal, its whole query block's band up to
    // the tile's last position.
    std::set<int64_t> want;
    for (const TokenRange& r : qr)
      for (int64_t p = r.begin; p < r.end; ++p) {
        const int64_t a = p / 64 * 64, b = a + 63, e = std::min(b, r.end - 1);
        for (int64_t d : diagonals)
          for (int64_t k = std::max<int64_t>(0, a - d); k <= std::min(b - d, e); ++k)
            want.insert(k);
        for (int64_t c : columns)
          if (c <= qr.back().end - 1) want.insert(c);
      }
    std::set<int64_t> got;
    for (const TokenRange& r : VerticalSlashNeeds(qr, columns, diagonals))
      for (int64_t p = r.begin; p < r.end; ++p) got.insert(p);
    EXPECT_EQ(got, want) << "trial " << trial;
  }
}

TEST(RangeArithmeticTest, IntersectSubtractNormalize) {
  const std::vector<TokenRange> a = {{0, 10}, {20, 30}}, b = {{5, 22}, {25, 26}, {29, 40}};
  EXPECT_EQ(Flatten(IntersectRanges(a, b)), (std::vector<int64_t>{5, 10, 20, 22, 25, 26, 29, 30}));
  EXPECT_EQ(Flatten(SubtractRanges(a, b)), (std::vector<int64_t>{0, 5, 22, 25, 26, 29}));
  EXPECT_EQ(Flatten(SubtractRanges(a, {})), Flatten(a));
  EXPECT_TRUE(SubtractRanges(a, std::vector<TokenRange>{{0, 30}}).empty());
  EXPECT_EQ(Flatten(NormalizeRanges({{7, 9}, {0, 3}, {3, 5}, {8, 12}, {20, 20}})),
            (std::vector<int64_t>{0, 5, 7, 12}));
}

}  // namespace
}  // namespace millipede

namespace millipede {
namespace {

// CausalPairs and WindowPairs against counting key by key, over query ranges that start anywhere
// (a shard's or a chunk's), sinks longer or shorter than the window, windows past the positions.
TEST(AttendedPairsTest, ClosedFormsEqualCountingEachKey) {
  const std::vector<std::vector<TokenRange>> query_sets = {
      {{0, 1}}, {{0, 50}}, {{7, 8}}, {{13, 61}, {90, 91}, {120, 200}}, {{0, 0}}};
  for (const auto& queries : query_sets)
    for (int64_t sink : {0, 1, 4, 30})
      for (int64_t window : {1, 3, 16, 64, 1000}) {
        int64_t causal = 0, windowed = 0;
        for (const TokenRange& q : queries)
          for (int64_t p = q.begin; p < q.end; ++p)
            for (int64_t k = 0; k <= p; ++k) {
              ++causal;
              windowed += k < sink || p - k < window;
            }
        EXPECT_EQ(CausalPairs(queries), causal);
        EXPECT_EQ(WindowPairs(queries, sink, window), windowed)
            << "sink " << sink << " window " << window << " from " << queries[0].begin;
      }
}

}  // namespace
}  // namespace millipede
