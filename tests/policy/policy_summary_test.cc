// Expected density: each pattern's pair count against a count over the explicit mask (a-shape)
// or the per-query budget (the dynamic patterns' bounds), layer and model means, the dense
// fallback; and the show table's rows, codes and legends.
#include "policy/policy_summary.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace millipede {
namespace {

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

HeadPrefillPolicy AShape(int64_t sink, int64_t window) {
  HeadPrefillPolicy h;
  h.pattern = PrefillPattern::kAShape;
  h.a_shape = {sink, window};
  return h;
}
HeadPrefillPolicy VerticalSlash(int64_t vertical, int64_t slash) {
  HeadPrefillPolicy h;
  h.pattern = PrefillPattern::kVerticalSlash;
  h.vertical_slash = {64, vertical, slash};
  return h;
}
HeadPrefillPolicy BlockSparse(int64_t block, int64_t top_blocks) {
  HeadPrefillPolicy h;
  h.pattern = PrefillPattern::kBlockSparse;
  h.block_sparse = {block, top_blocks};
  return h;
}

// Pairs of the A-shape mask counted one by one: key k is seen by query p when k <= p and
// (k < sink or p - k < window), as the attention kernels define it.
double AShapeMaskPairs(int64_t sink, int64_t window, int64_t length) {
  double pairs = 0;
  for (int64_t p = 0; p < length; ++p)
    for (int64_t k = 0; k <= p; ++k) pairs += (k < sink || p - k < window) ? 1 : 0;
  return pairs;
}

// At most `budget` keys per query, never more than the causal row.
double BudgetRowPairs(int64_t budget, int64_t length) {
  double pairs = 0;
  for (int64_t p = 0; p < length; ++p) pairs += static_cast<double>(std::min(p + 1, budget));
  return pairs;
}

TEST(PolicySummaryTest, PairCountsMatchTheMaskAndTheBudgets) {
  for (int64_t length : {1, 2, 7, 64, 100, 333}) {
    EXPECT_EQ(CausalPairs(length), length * (length + 1) / 2.0);
    EXPECT_EQ(ExpectedPrefillPairs(HeadPrefillPolicy{}, length), CausalPairs(length));
    for (auto [sink, window] :
         {std::pair<int64_t, int64_t>{1, 1}, {4, 16}, {64, 200}, {500, 500}}) {
      EXPECT_EQ(ExpectedPrefillPairs(AShape(sink, window), length),
                AShapeMaskPairs(sink, window, length))
          << sink << "+" << window << " at " << length;
    }
    for (auto [vertical, slash] : {std::pair<int64_t, int64_t>{1, 1}, {30, 50}, {300, 300}})
      EXPECT_EQ(ExpectedPrefillPairs(VerticalSlash(vertical, slash), length),
                BudgetRowPairs(vertical + slash, length));
    for (auto [block, top] : {std::pair<int64_t, int64_t>{8, 3}, {64, 100}, {16, 1}})
      EXPECT_EQ(ExpectedPrefillPairs(BlockSparse(block, top), length),
                BudgetRowPairs(block * top, length));
  }
  EXPECT_EQ(ExpectedPrefillPairs(AShape(4, 4), 0), 0);
  // Large lengths stay exact in double: 1M tokens, 128 + 4096.
  const double n = 1 << 20, c = 128 + 4096;
  EXPECT_EQ(ExpectedPrefillPairs(AShape(128, 4096), 1 << 20), c * (c + 1) / 2 + (n - c) * c);
}

AttentionPolicy TwoLayers() {
  AttentionPolicy p = DensePolicy(2, 4);
  p.layers[1].prefill = {AShape(8, 24), VerticalSlash(30, 50), BlockSparse(16, 2), AShape(8, 56)};
  p.layers[1].decode = {DecodeRole::kStreamingHead, DecodeRole::kFull, DecodeRole::kFull,
                        DecodeRole::kStreamingHead};
  p.streaming_head = {8, 24};
  return p;
}

TEST(PolicySummaryTest, LayerAndModelDensitiesAreMeansOverKvHeads) {
  const AttentionPolicy p = TwoLayers();
  const int64_t length = 1000;
  const PolicyDensity d = ExpectedDensity(p, length);
  ASSERT_EQ(d.layers.size(), 2u);
  EXPECT_EQ(d.layers[0], 1.0);
  const double causal = CausalPairs(length);
  const double layer1 = (BudgetRowPairs(32, length) + BudgetRowPairs(80, length) +
                         BudgetRowPairs(32, length) + BudgetRowPairs(64, length)) /
                        causal / 4;
  EXPECT_DOUBLE_EQ(d.layers[1], layer1);
  EXPECT_DOUBLE_EQ(d.overall, (1.0 + layer1) / 2);
  EXPECT_FALSE(d.dense_fallback);

  AttentionPolicy fallback = p;
  fallback.dense_below_tokens = 1001;
  const PolicyDensity f = ExpectedDensity(fallback, length);
  EXPECT_TRUE(f.dense_fallback);
  EXPECT_EQ(f.layers[1], 1.0);
  EXPECT_EQ(f.overall, 1.0);
  fallback.dense_below_tokens = 1000;  // a prompt of exactly the limit runs the policy
  EXPECT_FALSE(ExpectedDensity(fallback, length).dense_fallback);
}

TEST(PolicySummaryTest, TableListsEveryHeadWithLegends) {
  const std::string table = PolicySummaryTable(TwoLayers(), 16, 1000);
  EXPECT_HAS(table, "2 layers x 4 KV heads (16 query heads); dense_below_tokens 0\n");
  EXPECT_HAS(table, "expected prefill density at 1000 tokens");
  EXPECT_HAS(table, "    0  100.000%   D  D  D  D ");
  EXPECT_HAS(table, "F F F F\n");
  EXPECT_HAS(table, "A1 V1 B1 A2 ");
  EXPECT_HAS(table, "S F F S\n");
  EXPECT_HAS(table, "\n  D dense\n");
  AttentionPolicy fp8 = TwoLayers();
  fp8.fp8_attention = true;
  EXPECT_HAS(PolicySummaryTable(fp8, 16, 1000),
             "(16 query heads); dense_below_tokens 0; fp8 attention in prefill\n");
  EXPECT_HAS(table, "\n  A1 a-shape sink_tokens 8 window_tokens 24\n");
  EXPECT_HAS(table, "\n  A2 a-shape sink_tokens 8 window_tokens 56\n");
  EXPECT_HAS(table, "\n  V1 vertical-slash last_queries 64 vertical 30 slash 50\n");
  EXPECT_HAS(table, "\n  B1 block-sparse block 16 top_blocks 2\n");
  EXPECT_HAS(table, "\n  F full\n  S streaming-head sink_tokens 8 window_tokens 24\n");
  EXPECT_HAS(table, "summary: " + TwoLayers().Summary() + "\n");
  const PolicyDensity d = ExpectedDensity(TwoLayers(), 1000);
  char overall[64];
  std::snprintf(overall, sizeof(overall), "  all %8.3f%%", 100 * d.overall);
  EXPECT_HAS(table, overall);

  AttentionPolicy fallback = TwoLayers();
  fallback.dense_below_tokens = 4096;
  EXPECT_HAS(PolicySummaryTable(fallback, 16, 1000),
             "below dense_below_tokens: every head runs dense");
}

}  // namespace
}  // namespace millipede
