// SparseIndexPairsRef: the closed form of one range against counting query by query, random
// indices against a brute-force count over every (query, key) pair, the causal index (every key
// up to the tile) giving the causal pairs, accumulation across calls, malformed offsets refused.
#include "kernels/sparse_index/sparse_index_pairs.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "tests/kernels/sparse_index/sparse_index_pairs_test_util.h"

namespace millipede {
namespace {

using testing::RandomPairsIndex;

TEST(SparseIndexPairsTest, RangeClosedFormEqualsCountingEachQuery) {
  for (int64_t begin = 0; begin < 12; ++begin)
    for (int64_t end = begin; end < 14; ++end)
      for (int64_t q_first = 0; q_first < 16; ++q_first)
        for (int64_t q_count = 0; q_count < 6; ++q_count) {
          int64_t want = 0;
          for (int64_t q = q_first; q < q_first + q_count; ++q)
            for (int64_t k = begin; k < end; ++k) want += k <= q;
          EXPECT_EQ(SparseRangePairs(begin, end, q_first, q_count), want)
              << begin << " " << end << " " << q_first << " " << q_count;
        }
}

TEST(SparseIndexPairsTest, RandomIndicesEqualBruteForce) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    auto index = RandomPairsIndex(seed, /*heads=*/1 + static_cast<int64_t>(seed % 4),
                                          /*tiles=*/1 + static_cast<int64_t>(seed % 7));
    int64_t brute = 0;
    for (size_t i = 0; i < index.items.size(); ++i) {
      const auto& item = index.items[i];
      for (int64_t q = item.q_first; q < item.q_first + item.q_count; ++q) {
        for (const auto& r : item.ranges)
          for (int64_t k = r[0]; k < r[1]; ++k) brute += k <= q;
        for (int64_t c : item.columns) brute += c <= q;
      }
    }
    HostTensor pairs(DType::kI64, {1});
    pairs.data<int64_t>()[0] = 5;  // added to, not written over
    SparseIndexPairsArgs a = index.Args();
    a.pairs = pairs.view();
    ASSERT_TRUE(SparseIndexPairsRef(a).ok());
    EXPECT_EQ(pairs.data<int64_t>()[0], brute + 5) << "seed " << seed;
  }
}

TEST(SparseIndexPairsTest, CausalIndexGivesTheCausalPairs) {
  // Two KV heads, tiles of positions [0, 64), [64, 128), [128, 150), each item one range of every
  // key up to the tile's end: sum over queries of (p + 1), per head.
  testing::PairsIndex index;
  index.num_kv_heads = 2;
  index.tiles = {{0, 64, 0}, {64, 128, 64}, {128, 150, 128}};
  for (int64_t g = 0; g < 2; ++g)
    for (const auto& t : index.tiles)
      index.items.push_back({t[2], t[1] - t[0], {{0, t[2] + t[1] - t[0]}}, {}});
  HostTensor pairs(DType::kI64, {1});
  pairs.data<int64_t>()[0] = 0;
  SparseIndexPairsArgs a = index.Args();
  a.pairs = pairs.view();
  ASSERT_TRUE(SparseIndexPairsRef(a).ok());
  EXPECT_EQ(pairs.data<int64_t>()[0], 2 * 150 * 151 / 2);
}

TEST(SparseIndexPairsTest, MalformedOffsetsAreRefused) {
  auto index = RandomPairsIndex(3, 2, 3);
  SparseIndexPairsArgs a = index.Args();
  HostTensor pairs(DType::kI64, {1});
  pairs.data<int64_t>()[0] = 0;
  a.pairs = pairs.view();
  // An item whose offsets run backwards.
  index.range_offsets.data<int64_t>()[2] = index.range_offsets.data<int64_t>()[3] + 1;
  EXPECT_EQ(SparseIndexPairsRef(a).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(pairs.data<int64_t>()[0], 0);
  a.num_kv_heads = -1;
  EXPECT_EQ(SparseIndexPairsRef(a).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace millipede
