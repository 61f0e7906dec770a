// SparseAttentionRef against dense attention and the explicit mask: ranges covering every key are
// dense causal attention bit for bit (whatever the split into ranges and columns and the order of
// rows in the key buffer); A-shape as static ranges on one-row tiles is AttentionRef's windowed
// attention; random vertical-slash-like indexes (different per head) match a brute force over
// the explicit mask for GQA 1/4/8, F32/BF16/F16 keys, odd sizes and split key layouts; empty
// items, columns only, keys only in the future; split indexes merged equal the whole.
#include "kernels/attention/sparse_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/attention/attention.h"
#include "kernels/attention/merge_state.h"
#include "tests/kernels/attention/sparse_test_util.h"

namespace millipede {
namespace {

using testing::AllClose;
using testing::BuildSparseCase;
using testing::CView;
using testing::PoisonedF32;
using testing::RandomSparseItem;
using testing::RandomTensor;
using testing::SparseBruteForce;
using testing::SparseCase;
using testing::SparseItem;
using testing::SparseLayout;
using testing::SparseResult;
using testing::SparseRow3;
using testing::SparseTilesOf;

SparseResult RunRef(const HostTensor& q, const HostTensor& k, const HostTensor& v,
                    const SparseCase& c, float scale = 0.0f) {
  const int64_t n_q = q.shape()[0], hq = q.shape()[1], d = q.shape()[2];
  SparseResult r{PoisonedF32({n_q, hq, d}), PoisonedF32({n_q, hq})};
  SparseAttentionArgs args{CView(q),  CView(k), CView(v),   c.tiles.view(),
                           c.index(), scale,    r.o.view(), r.lse.view()};
  const Status status = SparseAttentionRef(args);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return r;
}

SparseResult RunDense(const HostTensor& q, const HostTensor& k, const HostTensor& v,
                      int64_t q_offset, float scale = 0.0f,
                      const std::vector<int64_t>& windows = {}, int64_t sink = 0) {
  const int64_t n_q = q.shape()[0], hq = q.shape()[1], d = q.shape()[2];
  SparseResult r{PoisonedF32({n_q, hq, d}), PoisonedF32({n_q, hq})};
  AttentionArgs args{CView(q), CView(k),   CView(v),    q_offset, 0, AttentionMask::kCausal,
                     scale,    r.o.view(), r.lse.view()};
  args.kv_head_window = windows.empty() ? nullptr : windows.data();
  args.sink_tokens = sink;
  const Status status = AttentionRef(args);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return r;
}

// K or V rows rearranged into a layout's buffer (row RowOf(p) holds position p).
HostTensor Relayout(const HostTensor& t, const SparseLayout& layout) {
  const int64_t n = t.shape()[0], row = t.NumElements() / n * DTypeSize(t.dtype());
  HostTensor out(t.dtype(), t.shape());
  for (int64_t p = 0; p < n; ++p)
    std::copy_n(static_cast<const char*>(t.view().data) + p * row, row,
                static_cast<char*>(out.view().data) + layout.RowOf(p) * row);
  return out;
}

void ExpectBitEqual(const SparseResult& got, const SparseResult& want) {
  EXPECT_TRUE(AllClose(got.o, want.o, 0.0, 0.0));
  EXPECT_TRUE(AllClose(got.lse, want.lse, 0.0, 0.0));
}

TEST(SparseAttentionTest, CoveringEverythingIsDenseCausal) {
  const int64_t n_q = 150, n_kv = 230, hq = 8, hk = 2, d = 32, q_offset = n_kv - n_q;
  const HostTensor q = RandomTensor(DType::kF32, {n_q, hq, d}, 1, -2, 2);
  const HostTensor k = RandomTensor(DType::kBF16, {n_kv, hk, d}, 2, -2, 2);
  const HostTensor v = RandomTensor(DType::kBF16, {n_kv, hk, d}, 3);
  const std::vector<SparseRow3> tiles = SparseTilesOf(n_q, q_offset);
  const int64_t items = hk * static_cast<int64_t>(tiles.size());
  for (float scale : {0.0f, 0.3f}) {
    const SparseResult dense = RunDense(q, k, v, q_offset, scale);
    // One range over every key.
    const SparseLayout identity = SparseLayout::Identity(n_kv);
    SparseItem all{{{0, n_kv}}, {}};
    ExpectBitEqual(RunRef(q, k, v, BuildSparseCase(tiles, {size_t(items), all}, identity), scale),
                   dense);
    // Several ranges and columns, in a buffer whose halves are swapped and split in three runs.
    const SparseLayout swapped{{{0, 100, 130}, {100, 130, 0}, {130, n_kv, 30}}};
    SparseItem split{{{0, 37}, {50, 120}, {121, n_kv}},
                     {37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 120}};
    ExpectBitEqual(RunRef(q, Relayout(k, swapped), Relayout(v, swapped),
                          BuildSparseCase(tiles, {size_t(items), split}, swapped), scale),
                   dense);
  }
}

// Items of one-row tiles: per KV head, the sinks and the window of an A-shape head (window 0:
// every key up to the query).
std::vector<SparseItem> AShapeItems(const std::vector<SparseRow3>& tiles,
                                    const std::vector<int64_t>& windows, int64_t sink) {
  std::vector<SparseItem> items;
  for (int64_t w : windows)
    for (const SparseRow3& t : tiles) {
      const int64_t p = t[2], from = w == 0 ? 0 : std::max<int64_t>(0, p - w + 1);
      SparseItem item;
      if (from <= sink) {
        item.ranges = {{0, p + 1}};
      } else {
        item.ranges = {{0, sink}, {from, p + 1}};
      }
      items.push_back(item);
    }
  return items;
}

TEST(SparseAttentionTest, AShapeIsWindowedAttention) {
  const int64_t n_q = 70, n_kv = 90, hq = 8, hk = 4, d = 16, q_offset = 20, sink = 3;
  const HostTensor q = RandomTensor(DType::kF32, {n_q, hq, d}, 4, -2, 2);
  const HostTensor k = RandomTensor(DType::kF16, {n_kv, hk, d}, 5, -2, 2);
  const HostTensor v = RandomTensor(DType::kF16, {n_kv, hk, d}, 6);
  const std::vector<int64_t> windows = {0, 5, 1, 17};
  const std::vector<SparseRow3> tiles = SparseTilesOf(n_q, q_offset, 1);
  const SparseCase c =
      BuildSparseCase(tiles, AShapeItems(tiles, windows, sink), SparseLayout::Identity(n_kv));
  const SparseResult dense = RunDense(q, k, v, q_offset, 0.0f, windows, sink);
  ExpectBitEqual(RunRef(q, k, v, c), dense);
  // The windows matter: without them the result differs.
  EXPECT_FALSE(AllClose(RunDense(q, k, v, q_offset).o, dense.o, 1e-3, 1e-3));
}

struct RandomCase {
  int64_t n_q, q_offset, hq, hk, d;
  DType kv_dtype;
  bool split_layout;
};

void ExpectRandomCaseMatches(const RandomCase& rc, uint64_t seed) {
  SCOPED_TRACE(::testing::Message()
               << "heads " << rc.hq << "/" << rc.hk << " d " << rc.d << " dtype "
               << DTypeName(rc.kv_dtype) << " split " << rc.split_layout);
  const int64_t n_pos = rc.q_offset + rc.n_q;
  // A split layout holds the positions in two runs out of order with unused rows between them.
  const SparseLayout layout =
      rc.split_layout ? SparseLayout{{{0, n_pos / 2, n_pos - n_pos / 2 + 7}, {n_pos / 2, n_pos, 0}}}
                      : SparseLayout::Identity(n_pos);
  const int64_t n_kv = layout.Rows();
  const HostTensor q = RandomTensor(DType::kF32, {rc.n_q, rc.hq, rc.d}, seed, -2, 2);
  const HostTensor k = RandomTensor(rc.kv_dtype, {n_kv, rc.hk, rc.d}, seed + 1, -2, 2);
  const HostTensor v = RandomTensor(rc.kv_dtype, {n_kv, rc.hk, rc.d}, seed + 2);
  const std::vector<SparseRow3> tiles = SparseTilesOf(rc.n_q, rc.q_offset);
  std::mt19937_64 rng(seed + 3);
  std::vector<SparseItem> items;
  for (int64_t g = 0; g < rc.hk; ++g)
    for (const SparseRow3& t : tiles)
      items.push_back(RandomSparseItem(rng, t[2] + t[1] - t[0] - 1, n_pos));
  const SparseResult got = RunRef(q, k, v, BuildSparseCase(tiles, items, layout));
  const SparseResult want = SparseBruteForce(q, k, v, tiles, items, layout);
  EXPECT_TRUE(AllClose(got.o, want.o, 1e-6, 1e-7));
  EXPECT_TRUE(AllClose(got.lse, want.lse, 1e-6, 1e-7));
  EXPECT_TRUE(testing::AllFinite(got.o));
}

TEST(SparseAttentionTest, RandomIndexesMatchTheExplicitMask) {
  uint64_t seed = 100;
  for (const auto& [hq, hk] : {std::pair<int64_t, int64_t>{3, 3}, {8, 2}, {8, 1}})
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16})
      for (bool split : {false, true})
        ExpectRandomCaseMatches({97, 131, hq, hk, 24, dtype, split}, seed += 10);
  ExpectRandomCaseMatches({64, 0, 4, 1, 128, DType::kBF16, false}, seed += 10);
  ExpectRandomCaseMatches({5, 61, 2, 2, 8, DType::kF32, true}, seed += 10);
}

TEST(SparseAttentionTest, EmptyItemsAndFutureKeysGiveZeroAndMinusInfinity) {
  const int64_t n_q = 40, n_kv = 120, hq = 4, hk = 2, d = 8;
  const HostTensor q = RandomTensor(DType::kF32, {n_q, hq, d}, 7, -2, 2);
  const HostTensor k = RandomTensor(DType::kF32, {n_kv, hk, d}, 8, -2, 2);
  const HostTensor v = RandomTensor(DType::kF32, {n_kv, hk, d}, 9);
  // Rows [0, 10) and [30, 40) are in tiles; rows [10, 30) are in none and stay untouched.
  const std::vector<SparseRow3> tiles = {{0, 10, 64}, {30, 40, 94}};
  // Head 0: tile 0 empty, tile 1 only keys after its queries; head 1: columns only.
  const std::vector<SparseItem> items = {
      {}, {{{110, 115}}, {104, 119}}, {{}, {3, 64, 70, 99}}, {{}, {0, 95, 100}}};
  const SparseLayout layout = SparseLayout::Identity(n_kv);
  const SparseResult got = RunRef(q, k, v, BuildSparseCase(tiles, items, layout));
  const SparseResult want = SparseBruteForce(q, k, v, tiles, items, layout);
  EXPECT_TRUE(testing::SparseAllClose(got.o, want.o, 1e-6, 1e-7));
  EXPECT_TRUE(testing::SparseAllClose(got.lse, want.lse, 1e-6, 1e-7));
  for (int64_t row : {0, 9, 30, 39})
    for (int64_t h : {0, 1}) {
      EXPECT_EQ(got.lse.data<float>()[row * hq + h], -INFINITY) << row;
      for (int64_t c = 0; c < d; ++c) EXPECT_EQ(got.o.data<float>()[(row * hq + h) * d + c], 0.0f);
    }
  // Head 1's row 0 (position 64) sees columns 3 and 64; row 30 (position 94) sees only 0.
  EXPECT_TRUE(std::isfinite(got.lse.data<float>()[0 * hq + 2]));
  EXPECT_TRUE(std::isfinite(got.lse.data<float>()[30 * hq + 3]));
  for (int64_t i = 10 * hq; i < 30 * hq; ++i) EXPECT_TRUE(std::isnan(got.lse.data<float>()[i]));
}

TEST(SparseAttentionTest, SplitIndexesMergedEqualTheWhole) {
  // Ranges and columns as two calls merged by log-sum-exp: how a rank combines its local keys
  // with keys fetched from others.
  const int64_t n_q = 90, n_pos = 300, hq = 4, hk = 2, d = 16, q_offset = n_pos - n_q;
  const HostTensor q = RandomTensor(DType::kF32, {n_q, hq, d}, 11, -2, 2);
  const HostTensor k = RandomTensor(DType::kBF16, {n_pos, hk, d}, 12, -2, 2);
  const HostTensor v = RandomTensor(DType::kBF16, {n_pos, hk, d}, 13);
  const std::vector<SparseRow3> tiles = SparseTilesOf(n_q, q_offset);
  std::mt19937_64 rng(14);
  std::vector<SparseItem> whole, ranges, columns;
  for (int64_t g = 0; g < hk; ++g)
    for (const SparseRow3& t : tiles) {
      whole.push_back(RandomSparseItem(rng, t[2] + t[1] - t[0] - 1, n_pos));
      ranges.push_back({whole.back().ranges, {}});
      columns.push_back({{}, whole.back().columns});
    }
  const SparseLayout layout = SparseLayout::Identity(n_pos);
  const SparseResult all = RunRef(q, k, v, BuildSparseCase(tiles, whole, layout));
  SparseResult merged = RunRef(q, k, v, BuildSparseCase(tiles, ranges, layout));
  const SparseResult part = RunRef(q, k, v, BuildSparseCase(tiles, columns, layout));
  ASSERT_TRUE(
      MergeStateInPlaceRef(merged.o.view(), merged.lse.view(), CView(part.o), CView(part.lse))
          .ok());
  EXPECT_TRUE(AllClose(merged.o, all.o, 1e-6, 1e-7));
  EXPECT_TRUE(AllClose(merged.lse, all.lse, 1e-6, 1e-7));
}

}  // namespace
}  // namespace millipede
