// TopKKeysRef and TopKCutRef: keys by hand and against TopK's order; the cut over simulated
// ranks (1-5, zig-zag shards) gives, united over the ranks, exactly the columns of one TopK over
// all positions — with ties, NaN, infinities, signed zeros, k beyond a shard or beyond every
// position; each rank's share in column order; bad ranges, columns, ranks and slots.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "kernels/selection/top_k.h"
#include "kernels/selection/top_k_cut.h"
#include "kernels/selection/top_k_key.h"
#include "kernels/selection/top_k_keys.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/selection/top_k_cut_test_util.h"

namespace millipede {
namespace {

using testing::CView;
using testing::kInf;
using testing::kNaN;
using testing::Scores;

TEST(TopKKeysTest, ByHand) {
  // Columns 0-2 are positions 10-12, columns 3-4 positions 40-41.
  const std::vector<TopKPositionRange> ranges = {{10, 13}, {40, 42}};
  HostTensor index(DType::kI32, {1, 4}), value(DType::kF32, {1, 4}), keys(DType::kI64, {1, 4});
  const int32_t columns[] = {0, 4, 2, -1};
  const float values[] = {0.5f, -0.0f, 0.0f, kNaN};
  std::copy(columns, columns + 4, index.data<int32_t>());
  std::copy(values, values + 4, value.data<float>());
  ASSERT_TRUE(TopKKeysRef({CView(index), CView(value), ranges, keys.view()}).ok());
  const auto* k = reinterpret_cast<const uint64_t*>(keys.data<int64_t>());
  EXPECT_EQ(k[0], (uint64_t{0x3f000000u | 0x80000000u} << 32) | (0xffffffffu - 10));
  EXPECT_EQ(k[1], (uint64_t{0x80000000u} << 32) | (0xffffffffu - 41));  // -0.0 keys as +0.0
  EXPECT_EQ(k[2], (uint64_t{0x80000000u} << 32) | (0xffffffffu - 12));
  EXPECT_EQ(k[3], 0u);
  EXPECT_GT(k[2], k[1]);  // equal scores: the lower position ranks first
}

TEST(TopKKeysTest, KeyOrderIsTopKOrder) {
  const float values[] = {-kInf, -2.0f, -0.0f, 0.0f, 1e-30f, 0.5f, 3.0f, kInf};
  for (float a : values)
    for (float b : values)
      for (uint64_t pa : {0u, 7u})
        for (uint64_t pb : {3u, 0xfffffffeu}) {
          const bool a_first = a != b ? a > b : pa < pb;
          EXPECT_EQ(TopKEntryKey(TopKFloatKey(a), pa) > TopKEntryKey(TopKFloatKey(b), pb), a_first)
              << a << "@" << pa << " vs " << b << "@" << pb;
        }
  EXPECT_GT(TopKEntryKey(TopKFloatKey(-kInf), 0xffffffffu), 0u);
}

TEST(TopKKeysTest, RefusesBadRangesAndColumns) {
  HostTensor index(DType::kI32, {1, 2}), value(DType::kF32, {1, 2}), keys(DType::kI64, {1, 2});
  index.data<int32_t>()[0] = 0;
  index.data<int32_t>()[1] = 3;  // three positions below
  const std::vector<TopKPositionRange> three = {{0, 3}};
  Status s = TopKKeysRef({CView(index), CView(value), three, keys.view()});
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.ToString();
  index.data<int32_t>()[1] = -2;
  EXPECT_EQ(TopKKeysRef({CView(index), CView(value), three, keys.view()}).code(),
            StatusCode::kOutOfRange);
  index.data<int32_t>()[1] = 1;
  const std::vector<TopKPositionRange> overlapping = {{0, 3}, {2, 5}};
  const std::vector<TopKPositionRange> too_far = {{0, (int64_t{1} << 32) + 1}};
  const std::vector<TopKPositionRange> too_many(kTopKKeysMaxRanges + 1, TopKPositionRange{});
  for (const auto& bad : {overlapping, too_far, too_many})
    EXPECT_EQ(TopKKeysRef({CView(index), CView(value), bad, keys.view()}).code(),
              StatusCode::kInvalidArgument);
  HostTensor wrong(DType::kI32, {1, 2});
  EXPECT_EQ(TopKKeysRef({CView(index), CView(value), three, wrong.view()}).code(),
            StatusCode::kInvalidArgument);
}

// This rank's chosen columns of each row as global positions, checking the share's layout:
// increasing columns, then -1 only.
std::vector<std::vector<int64_t>> ChosenPositions(const testing::RankOffer& offer,
                                                   const HostTensor& chosen) {
  const int64_t rows = chosen.shape()[0], slots = chosen.shape()[1];
  std::vector<int64_t> positions;
  for (const TopKPositionRange& r : offer.ranges)
    for (int64_t p = r.begin; p < r.end; ++p) positions.push_back(p);
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(rows));
  for (int64_t row = 0; row < rows; ++row) {
    int32_t last = -1;
    bool ended = false;
    for (int64_t i = 0; i < slots; ++i) {
      const int32_t c = chosen.data<int32_t>()[row * slots + i];
      if (c < 0) {
        EXPECT_EQ(c, -1);
        ended = true;
        continue;
      }
      EXPECT_FALSE(ended) << "a column after -1, row " << row;
      EXPECT_GT(c, last) << "row " << row;
      last = c;
      out[static_cast<size_t>(row)].push_back(positions[static_cast<size_t>(c)]);
    }
  }
  return out;
}

struct CutCase {
  int64_t rows, positions, ranks, k;
  Scores scores;
};

class TopKCutTest : public ::testing::TestWithParam<CutCase> {};

TEST_P(TopKCutTest, UnionIsOneTopK) {
  const CutCase c = GetParam();
  const HostTensor global = testing::GlobalScores(c.rows, c.positions, c.scores, 11 + c.k);
  HostTensor index(DType::kI32, {c.rows, c.k}), value(DType::kF32, {c.rows, c.k});
  ASSERT_TRUE(
      TopKRef({CView(global), c.k, index.view(), value.view(), TopKOrder::kColumn}).ok());
  const std::vector<testing::RankOffer> offers = testing::Offers(global, c.ranks, c.k);
  const HostTensor all = testing::Gathered(offers);
  std::vector<std::vector<int64_t>> united(static_cast<size_t>(c.rows));
  for (int64_t r = 0; r < c.ranks; ++r) {
    const testing::RankOffer& o = offers[static_cast<size_t>(r)];
    const int64_t slots = std::min(c.k, o.columns());
    HostTensor chosen(DType::kI32, {c.rows, slots});
    std::fill_n(chosen.data<int32_t>(), chosen.NumElements(), -77);
    const Status s = TopKCutRef({CView(all), CView(o.index), r, chosen.view()});
    ASSERT_TRUE(s.ok()) << s.ToString();
    const auto mine = ChosenPositions(o, chosen);
    for (int64_t row = 0; row < c.rows; ++row)
      united[static_cast<size_t>(row)].insert(united[static_cast<size_t>(row)].end(),
                                              mine[static_cast<size_t>(row)].begin(),
                                              mine[static_cast<size_t>(row)].end());
  }
  for (int64_t row = 0; row < c.rows; ++row) {
    std::vector<int64_t> expected;
    for (int64_t i = 0; i < c.k; ++i)
      if (index.data<int32_t>()[row * c.k + i] >= 0)
        expected.push_back(index.data<int32_t>()[row * c.k + i]);
    std::vector<int64_t>& got = united[static_cast<size_t>(row)];
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, expected) << "row " << row;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, TopKCutTest,
    ::testing::Values(CutCase{3, 40, 1, 7, Scores::kUniform},
                      CutCase{3, 40, 2, 7, Scores::kUniform},
                      CutCase{4, 97, 3, 16, Scores::kTies},
                      CutCase{2, 64, 4, 64, Scores::kTies},
                      CutCase{5, 50, 5, 12, Scores::kConstant},
                      CutCase{6, 81, 3, 20, Scores::kSpecial},
                      CutCase{2, 9, 4, 30, Scores::kUniform},  // k beyond every position
                      CutCase{2, 3, 4, 2, Scores::kUniform},   // ranks without positions
                      CutCase{8, 5000, 2, 256, Scores::kTies},
                      CutCase{1, 10, 2, 0, Scores::kTies}));

TEST(TopKCutTest, ByHand) {
  // Two ranks, k = 2, one row. Rank 0 offers (0.9 @ 1, 0.5 @ 0); rank 1 (0.9 @ 5, 0.7 @ 4).
  // Best two: 0.9 @ 1 (lower position than 0.9 @ 5), then 0.9 @ 5.
  HostTensor all(DType::kI64, {2, 1, 2}), index(DType::kI32, {1, 2}), chosen(DType::kI32, {1, 2});
  auto* k = reinterpret_cast<uint64_t*>(all.data<int64_t>());
  k[0] = TopKEntryKey(TopKFloatKey(0.5f), 0);
  k[1] = TopKEntryKey(TopKFloatKey(0.9f), 1);
  k[2] = TopKEntryKey(TopKFloatKey(0.7f), 4);
  k[3] = TopKEntryKey(TopKFloatKey(0.9f), 5);
  index.data<int32_t>()[0] = 0;
  index.data<int32_t>()[1] = 1;
  ASSERT_TRUE(TopKCutRef({CView(all), CView(index), 0, chosen.view()}).ok());
  EXPECT_EQ(chosen.data<int32_t>()[0], 1);
  EXPECT_EQ(chosen.data<int32_t>()[1], -1);
  ASSERT_TRUE(TopKCutRef({CView(all), CView(index), 1, chosen.view()}).ok());
  EXPECT_EQ(chosen.data<int32_t>()[0], 1);  // rank 1's second entry, position 5
  EXPECT_EQ(chosen.data<int32_t>()[1], -1);
}

// Some rows of a larger all-gathered block (several sequences' keys in one exchange), cut in
// place through the rank stride, give what a contiguous copy of those rows gives.
TEST(TopKCutTest, RowsOfALargerBlockCutAsTheirOwn) {
  const int64_t ranks = 3, rows = 5, k = 4, first = 2, count = 2;
  const HostTensor global = testing::GlobalScores(rows, 40, Scores::kTies, 11);
  const std::vector<testing::RankOffer> offers = testing::Offers(global, ranks, k);
  const HostTensor all = testing::Gathered(offers);
  HostTensor part(DType::kI64, {ranks, count, k});
  for (int64_t r = 0; r < ranks; ++r)
    std::copy(all.data<int64_t>() + (r * rows + first) * k,
              all.data<int64_t>() + (r * rows + first + count) * k,
              part.data<int64_t>() + r * count * k);
  for (int64_t r = 0; r < ranks; ++r) {
    const testing::RankOffer& o = offers[static_cast<size_t>(r)];
    const int64_t slots = std::min(k, o.columns());
    const ConstTensorView index{o.index.data<int32_t>() + first * k, DType::kI32, Shape{count, k}};
    const ConstTensorView strided{all.data<int64_t>() + first * k, DType::kI64,
                                  Shape{ranks, count, k}};
    HostTensor in_place(DType::kI32, {count, slots}), copied(DType::kI32, {count, slots});
    ASSERT_TRUE(TopKCutRef({strided, index, r, in_place.view(), rows * k}).ok());
    ASSERT_TRUE(TopKCutRef({CView(part), index, r, copied.view()}).ok());
    for (int64_t i = 0; i < count * slots; ++i)
      EXPECT_EQ(in_place.data<int32_t>()[i], copied.data<int32_t>()[i]) << "rank " << r << " " << i;
  }
  // A stride below one rank's keys is refused.
  HostTensor chosen(DType::kI32, {count, 1});
  const ConstTensorView index{offers[0].index.data<int32_t>(), DType::kI32, Shape{count, k}};
  EXPECT_EQ(TopKCutRef({CView(part), index, 0, chosen.view(), count * k - 1}).code(),
            StatusCode::kInvalidArgument);
}

TEST(TopKCutTest, RefusesBadArgs) {
  HostTensor all(DType::kI64, {2, 1, 2}), index(DType::kI32, {1, 2}), chosen(DType::kI32, {1, 2});
  auto* k = reinterpret_cast<uint64_t*>(all.data<int64_t>());
  for (int i = 0; i < 4; ++i) k[i] = TopKEntryKey(TopKFloatKey(1.0f), static_cast<uint64_t>(i));
  index.data<int32_t>()[0] = 0;
  index.data<int32_t>()[1] = 1;
  EXPECT_EQ(TopKCutRef({CView(all), CView(index), 2, chosen.view()}).code(),
            StatusCode::kInvalidArgument);
  HostTensor wide(DType::kI32, {1, 3});
  EXPECT_EQ(TopKCutRef({CView(all), CView(index), 0, wide.view()}).code(),
            StatusCode::kInvalidArgument);
  // Rank 0 keeps both of its entries: one slot is too few.
  HostTensor narrow(DType::kI32, {1, 1});
  EXPECT_EQ(TopKCutRef({CView(all), CView(index), 0, narrow.view()}).code(),
            StatusCode::kOutOfRange);
  // A kept entry without a column.
  index.data<int32_t>()[1] = -1;
  EXPECT_EQ(TopKCutRef({CView(all), CView(index), 0, chosen.view()}).code(),
            StatusCode::kOutOfRange);
  HostTensor flat(DType::kI64, {4});
  EXPECT_EQ(TopKCutRef({CView(flat), CView(index), 0, chosen.view()}).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace millipede
