#include "common/shard_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace millipede {
namespace {

TEST(ShardPlanTest, ZigZagChunks) {
  auto plan = ShardPlan::Create(16, 2);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->chunks().size(), 4u);
  auto r0 = plan->RankPromptRanges(0), r1 = plan->RankPromptRanges(1);
  EXPECT_EQ(r0[0].begin, 0);
  EXPECT_EQ(r0[0].end, 4);
  EXPECT_EQ(r0[1].begin, 12);
  EXPECT_EQ(r0[1].end, 16);
  EXPECT_EQ(r1[0].begin, 4);
  EXPECT_EQ(r1[1].begin, 8);
  EXPECT_EQ(plan->RankOfPromptPosition(15), 0);
  EXPECT_EQ(plan->RankOfPromptPosition(9), 1);
}

// Every position belongs to exactly one rank, token counts differ by at most two, and the causal
// work (sum of positions + 1 over a rank's tokens) is balanced to within one chunk's row.
TEST(ShardPlanTest, CoversAndBalancesAnyLength) {
  for (int ranks = 1; ranks <= 8; ++ranks) {
    for (int64_t s : {1, 2, 3, 5, 15, 16, 17, 64, 1000, 4097}) {
      auto plan = ShardPlan::Create(s, ranks);
      ASSERT_TRUE(plan.ok());
      std::vector<int> owner(static_cast<size_t>(s), -1);
      int64_t min_tokens = s, max_tokens = 0;
      double min_work = 1e300, max_work = 0;
      for (int r = 0; r < ranks; ++r) {
        double work = 0;
        for (const TokenRange& range : plan->RankPromptRanges(r))
          for (int64_t p = range.begin; p < range.end; ++p) {
            EXPECT_EQ(owner[p], -1) << "position " << p << " held twice";
            owner[p] = r;
            work += static_cast<double>(p + 1);
          }
        min_tokens = std::min(min_tokens, plan->RankPromptTokens(r));
        max_tokens = std::max(max_tokens, plan->RankPromptTokens(r));
        min_work = std::min(min_work, work);
        max_work = std::max(max_work, work);
      }
      for (int64_t p = 0; p < s; ++p) {
        ASSERT_GE(owner[p], 0) << "position " << p << " unheld, S=" << s << " N=" << ranks;
        EXPECT_EQ(plan->RankOfPromptPosition(p), owner[p]);
      }
      EXPECT_LE(max_tokens - min_tokens, 2) << "S=" << s << " N=" << ranks;
      if (s >= 64 * ranks) {
        EXPECT_LT((max_work - min_work) / max_work, 0.02) << s << " " << ranks;
      }
    }
  }
}

TEST(ShardPlanTest, RejectsBadArguments) {
  EXPECT_NE(ShardPlan::Create(0, 2).status().message().find("at least one token"),
            std::string::npos);
  EXPECT_FALSE(ShardPlan::Create(5, 0).ok());
}

TEST(ShardPlanTest, SliceRangeRows) {
  const std::vector<TokenRange> ranges = {{0, 4}, {10, 13}, {20, 25}};
  auto slice = [&](int64_t offset, int64_t count) {
    std::vector<std::pair<int64_t, int64_t>> out;
    for (const TokenRange& r : SliceRangeRows(ranges, offset, count))
      out.emplace_back(r.begin, r.end);
    return out;
  };
  using V = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(slice(0, 12), (V{{0, 4}, {10, 13}, {20, 25}}));
  EXPECT_EQ(slice(2, 4), (V{{2, 4}, {10, 12}}));
  EXPECT_EQ(slice(4, 3), (V{{10, 13}}));
  EXPECT_EQ(slice(8, 10), (V{{21, 25}}));
  EXPECT_EQ(slice(12, 5), V{});
  EXPECT_EQ(slice(3, 0), V{});
}

// The rank that samples after a chunk is the one its plan puts the chunk's last token on.
TEST(ShardPlanTest, LastTokenRankIsTheLastPositionsRank) {
  for (int ranks = 1; ranks <= 8; ++ranks) {
    for (int64_t s = 1; s <= 40; ++s) {
      auto plan = ShardPlan::Create(s, ranks);
      ASSERT_TRUE(plan.ok());
      EXPECT_EQ(ShardPlan::LastTokenRank(s, ranks), plan->RankOfPromptPosition(s - 1))
          << "S=" << s << " N=" << ranks;
    }
  }
}

// Decode rows: the most decode K/V rows any rank stores, whatever position decode starts at.
TEST(ShardPlanTest, DecodeRowsPerRankCoversEveryOwner) {
  EXPECT_EQ(DecodeRowsPerRank(1, 4), 0);
  EXPECT_EQ(DecodeRowsPerRank(0, 4), 0);
  for (int ranks = 1; ranks <= 5; ++ranks) {
    for (int64_t max_new = 1; max_new <= 30; ++max_new) {
      const int64_t rows = DecodeRowsPerRank(max_new, ranks);
      int64_t most = 0;
      for (int64_t start = 0; start < ranks; ++start) {
        std::vector<int64_t> held(static_cast<size_t>(ranks), 0);
        // The last generated token is never stored.
        for (int64_t p = start; p < start + max_new - 1; ++p)
          ++held[static_cast<size_t>(ShardPlan::DecodeOwner(p, ranks))];
        for (int64_t h : held) most = std::max(most, h);
      }
      EXPECT_EQ(rows, most) << "max_new=" << max_new << " N=" << ranks;
    }
  }
}

// The prompt bound holds for every rank and is within two rows of the fullest one.
TEST(ShardPlanTest, PromptRowsBoundPerRankBoundsEveryRank) {
  for (int ranks = 1; ranks <= 8; ++ranks) {
    for (int64_t s : {1, 2, 3, 7, 16, 17, 1000, 4097}) {
      auto plan = ShardPlan::Create(s, ranks);
      ASSERT_TRUE(plan.ok());
      int64_t fullest = 0;
      for (int r = 0; r < ranks; ++r) fullest = std::max(fullest, plan->RankPromptTokens(r));
      const int64_t bound = PromptRowsBoundPerRank(s, ranks);
      EXPECT_GE(bound, fullest) << "S=" << s << " N=" << ranks;
      EXPECT_LE(bound - fullest, 2) << "S=" << s << " N=" << ranks;
      EXPECT_EQ(KvPositionsPerRank(s, 9, ranks), bound + DecodeRowsPerRank(9, ranks));
    }
  }
  EXPECT_EQ(KvPositionsPerRank(40, 21, 2), 30);
  EXPECT_EQ(KvPositionsPerRank(41, 1, 2), 22);
  EXPECT_EQ(KvPositionsPerRank(10, 5, 0), KvPositionsPerRank(10, 5, 1));
}

}  // namespace
}  // namespace millipede
