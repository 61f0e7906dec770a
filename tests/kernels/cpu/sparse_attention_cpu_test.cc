// SparseAttentionCpu against SparseAttentionRef: random vertical-slash-like indexes (several
// chunks per item, keys after the queries, split key layouts), GQA 1/4/8, head dims 16/64/128,
// F32/BF16/F16 keys and values, odd tile sizes, empty items, columns only, rows in no tile left
// untouched, guard bands, inputs unchanged, the reference's errors.
#include "kernels/cpu/sparse_attention_cpu.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "tests/kernels/attention/sparse_test_util.h"
#include "tests/kernels/cpu/cpu_test_util.h"

namespace millipede {
namespace {

using testing::BuildSparseCase;
using testing::CView;
using testing::GuardedTensor;
using testing::PoisonedF32;
using testing::RandomSparseItem;
using testing::RandomTensor;
using testing::SparseAllClose;
using testing::SparseCase;
using testing::SparseItem;
using testing::SparseLayout;
using testing::SparseRow3;
using testing::SparseTilesOf;

struct Case {
  int64_t n_q = 64, q_offset = 0, hq = 2, hk = 2, d = 16;
  DType kv_dtype = DType::kF32;
  bool split_layout = false;
  int64_t tile_rows = kSparseTileRows;
  float scale = 0.0f;
};

// Random items of the case, plus the given fixed ones in front (to force empty items etc.).
void ExpectMatchesReference(const Case& c, uint64_t seed,
                            const std::vector<SparseItem>& fixed = {}) {
  SCOPED_TRACE(::testing::Message()
               << "n_q " << c.n_q << " offset " << c.q_offset << " heads " << c.hq << "/" << c.hk
               << " d " << c.d << " " << DTypeName(c.kv_dtype) << " split " << c.split_layout);
  // Positions after the last query too: the causal mask must hide them.
  const int64_t n_pos = c.q_offset + c.n_q + 16;
  const SparseLayout layout =
      c.split_layout ? SparseLayout{{{0, n_pos / 3, n_pos - n_pos / 3 + 5}, {n_pos / 3, n_pos, 0}}}
                     : SparseLayout::Identity(n_pos);
  const int64_t n_kv = layout.Rows();
  const HostTensor q = RandomTensor(DType::kF32, {c.n_q, c.hq, c.d}, seed, -2, 2);
  const HostTensor k = RandomTensor(c.kv_dtype, {n_kv, c.hk, c.d}, seed + 1, -2, 2);
  const HostTensor v = RandomTensor(c.kv_dtype, {n_kv, c.hk, c.d}, seed + 2);
  const std::vector<SparseRow3> tiles = SparseTilesOf(c.n_q, c.q_offset, c.tile_rows);
  std::mt19937_64 rng(seed + 3);
  std::vector<SparseItem> items = fixed;
  while (items.size() < c.hk * tiles.size()) {
    const SparseRow3& t = tiles[items.size() % tiles.size()];
    items.push_back(RandomSparseItem(rng, t[2] + t[1] - t[0] - 1, n_pos));
  }
  const SparseCase sc = BuildSparseCase(tiles, items, layout);
  HostTensor ref_o = PoisonedF32({c.n_q, c.hq, c.d}), ref_lse = PoisonedF32({c.n_q, c.hq});
  ASSERT_TRUE(SparseAttentionRef({CView(q), CView(k), CView(v), CView(sc.tiles), sc.index(),
                                  c.scale, ref_o.view(), ref_lse.view()})
                  .ok());
  GuardedTensor gq(q), gk(k), gv(v), gtiles(sc.tiles), granges(sc.ranges), gcols(sc.columns);
  GuardedTensor o(PoisonedF32({c.n_q, c.hq, c.d})), lse(PoisonedF32({c.n_q, c.hq}));
  SparseIndexView index = sc.index();
  index.ranges = granges.cview();
  index.columns = gcols.cview();
  const Status s = SparseAttentionCpu(
      {gq.cview(), gk.cview(), gv.cview(), gtiles.cview(), index, c.scale, o.view(), lse.view()});
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(gq.Unchanged(q));
  EXPECT_TRUE(gk.Unchanged(k));
  EXPECT_TRUE(gv.Unchanged(v));
  EXPECT_TRUE(gtiles.Unchanged(sc.tiles));
  EXPECT_TRUE(granges.Unchanged(sc.ranges));
  EXPECT_TRUE(gcols.Unchanged(sc.columns));
  EXPECT_TRUE(SparseAllClose(o.Read(), ref_o, 2e-5, 2e-5));
  EXPECT_TRUE(SparseAllClose(lse.Read(), ref_lse, 1e-6, 1e-5));
}

TEST(SparseAttentionCpuTest, RandomIndexesOverShapesAndDtypes) {
  uint64_t seed = 1;
  struct Heads {
    int64_t q, kv;
  };
  for (const Heads h : {Heads{3, 3}, Heads{8, 2}, Heads{8, 1}})
    for (const int64_t d : {16, 64, 128})
      for (const DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
        Case c;
        c.hq = h.q;
        c.hk = h.kv;
        c.d = d;
        c.kv_dtype = dtype;
        c.n_q = 77;
        c.q_offset = 700;
        // The first item's keys fill several chunks, and one chunk mixes ranges and columns.
        ExpectMatchesReference(c, seed += 10, {{{{0, 300}, {305, 760}}, {302, 303}}});
      }
}

TEST(SparseAttentionCpuTest, LayoutsTilesAndScale) {
  Case c;
  c.hq = 8;
  c.hk = 2;
  c.d = 64;
  c.kv_dtype = DType::kBF16;
  c.n_q = 130;
  c.q_offset = 390;
  c.split_layout = true;
  ExpectMatchesReference(c, 200);
  c.tile_rows = 7;  // tiles that are parts of 64-position blocks
  c.scale = 0.25f;
  ExpectMatchesReference(c, 210);
  c.n_q = 1;  // one query row
  c.q_offset = 1000;
  ExpectMatchesReference(c, 220);
}

TEST(SparseAttentionCpuTest, EmptyItemsColumnsOnlyAndFutureKeys) {
  Case c;
  c.hq = 4;
  c.hk = 2;
  c.n_q = 100;
  c.q_offset = 28;  // tiles at positions [28, 64) and [64, 128)
  // Head 0: tile 0 empty, tile 1 keys only after its queries; head 1 tile 0 columns only.
  const std::vector<SparseItem> fixed = {{}, {{{128, 135}}, {140}}, {{}, {0, 5, 30, 40, 63}}};
  ExpectMatchesReference(c, 300, fixed);
}

TEST(SparseAttentionCpuTest, RefusesWhatTheReferenceRefuses) {
  const HostTensor q = RandomTensor(DType::kF32, {10, 2, 8}, 1);
  const HostTensor k = RandomTensor(DType::kF32, {20, 1, 8}, 2);
  HostTensor o = PoisonedF32({10, 2, 8}), lse = PoisonedF32({10, 2});
  const std::vector<SparseRow3> tiles = {{0, 10, 10}};
  SparseCase sc = BuildSparseCase(tiles, {{{{0, 20}}, {}}}, SparseLayout::Identity(20));
  SparseAttentionArgs args{CView(q),   CView(k), CView(k), CView(sc.tiles),
                           sc.index(), 0.0f,     o.view(), lse.view()};
  EXPECT_TRUE(SparseAttentionCpu(args).ok());
  sc.ranges.data<int64_t>()[1] = 21;
  EXPECT_EQ(SparseAttentionCpu(args).code(), StatusCode::kOutOfRange);
  sc.ranges.data<int64_t>()[1] = 20;
  args.scale = -1.0f;
  EXPECT_EQ(SparseAttentionCpu(args).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace millipede
