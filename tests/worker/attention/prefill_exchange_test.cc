// The choice between exchanging K/V blocks and exchanging queries and partials in a prefill step
// (worker/attention/prefill_exchange.h): pure arithmetic over the ranks' sizes.
#include "worker/attention/prefill_exchange.h"

#include <gtest/gtest.h>

#include <vector>

namespace millipede {
namespace {

// llama3-8b's shape: 32 query and 8 KV heads of 128, bf16 KV, F32 queries and partials.
ExchangeSizes Llama(const std::vector<int64_t>& blocks, const std::vector<int64_t>& queries) {
  ExchangeSizes s;
  s.block_rows = blocks;
  s.query_rows = queries;
  s.kv_row_bytes = 2 * 8 * 128 * 2;
  s.q_row_bytes = 32 * 128 * 4;
  s.part_row_bytes = 32 * 129 * 4;
  return s;
}

TEST(PrefillExchangeTest, BytesOfTheBusiestRank) {
  const std::vector<int64_t> blocks = {10, 20, 30}, queries = {1, 2, 4};
  ExchangeSizes s = Llama(blocks, queries);
  s.kv_row_bytes = 3;
  s.q_row_bytes = 5;
  s.part_row_bytes = 7;
  // Pass-KV: rank 0 receives 20 + 30 rows.
  EXPECT_EQ(PassKvBytes(s), 50 * 3);
  // Pass-Q: rank r receives the others' queries and (ranks - 1) partials of its own rows:
  // rank 0: 6 x 5 + 2 x 1 x 7 = 44, rank 1: 5 x 5 + 2 x 2 x 7 = 53, rank 2: 3 x 5 + 2 x 4 x 7 = 71.
  EXPECT_EQ(PassQBytes(s), 71);
}

TEST(PrefillExchangeTest, AutoPassesQueriesOnlyDeepIntoALongPrompt) {
  // A prompt's first step of 16K tokens over 4 ranks: the blocks are the queries' own rows.
  const std::vector<int64_t> first(4, 4096);
  EXPECT_EQ(ChooseExchange(PrefillExchange::kAuto, Llama(first, first), 4096),
            PrefillExchange::kPassKv);
  // The same step after 496K tokens: every rank holds 124K rows + its 4K.
  const std::vector<int64_t> deep(4, 128 * 1024);
  EXPECT_EQ(ChooseExchange(PrefillExchange::kAuto, Llama(deep, first), 4096),
            PrefillExchange::kPassQ);
  EXPECT_LT(PassQBytes(Llama(deep, first)) * 3, PassKvBytes(Llama(deep, first)));
  // Forced modes, and the cases that always pass K/V: one rank, no room for a round.
  EXPECT_EQ(ChooseExchange(PrefillExchange::kPassKv, Llama(deep, first), 4096),
            PrefillExchange::kPassKv);
  EXPECT_EQ(ChooseExchange(PrefillExchange::kPassQ, Llama(first, first), 4096),
            PrefillExchange::kPassQ);
  EXPECT_EQ(ChooseExchange(PrefillExchange::kPassQ, Llama(first, first), 0),
            PrefillExchange::kPassKv);
  const std::vector<int64_t> one = {1 << 20}, few = {16};
  EXPECT_EQ(ChooseExchange(PrefillExchange::kPassQ, Llama(one, few), 4096),
            PrefillExchange::kPassKv);
}

TEST(PrefillExchangeTest, RoundRowsAndBufferRowsAgree) {
  const int64_t part = 32 * 129 * 4, row = 8 * 128 * 2;
  EXPECT_EQ(PassQRoundRows(1 << 30, 1, part), 0);
  EXPECT_EQ(PassQRoundRows(3 * part - 1, 4, part), 0);
  EXPECT_EQ(PassQRoundRows(3 * part, 4, part), 1);
  for (int ranks : {2, 3, 4, 8}) {
    for (int64_t queries : {1, 7, 512, 4096}) {
      const int64_t rows = PassQBufferRows(queries, ranks, part, row);
      EXPECT_GE(PassQRoundRows(rows * row, ranks, part), queries);
      EXPECT_LT(PassQRoundRows((rows - 1) * row, ranks, part), queries);
    }
  }
}

TEST(PrefillExchangeTest, ParsesItsNamesAndRefusesOthers) {
  for (PrefillExchange m :
       {PrefillExchange::kAuto, PrefillExchange::kPassKv, PrefillExchange::kPassQ}) {
    auto parsed = ParsePrefillExchange(PrefillExchangeName(m));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, m);
  }
  auto bad = ParsePrefillExchange("ring");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("pass-kv"), std::string::npos);
}

}  // namespace
}  // namespace millipede
