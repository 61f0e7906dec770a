// AttentionCpu against AttentionRef: random inputs, odd sizes, GQA 1/4/8, head dims 16/64/80,
// F32/BF16/F16 keys and values, offsets, causal and unmasked, A-shape windows with sinks, hidden
// key rows, no LSE output, forced key splits (the decode path), guard bands and argument errors.
#include "kernels/cpu/attention_cpu.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "tests/kernels/cpu/cpu_test_util.h"

namespace millipede {
namespace {

using testing::CView;
using testing::GuardedTensor;
using testing::PoisonedF32;
using testing::RandomTensor;
using testing::ToFloats;

struct Case {
  int64_t n_q = 1, n_kv = 1, q_heads = 2, kv_heads = 2, head_dim = 16;
  DType k_dtype = DType::kF32, v_dtype = DType::kF32;
  int64_t q_offset = 0, k_offset = 0;
  AttentionMask mask = AttentionMask::kCausal;
  std::vector<int64_t> windows;  // per KV head; empty: none
  int64_t sink = 0;
  double hidden = 0.0;  // fraction of (key row, KV head) pairs hidden
  bool lse = true;
  float scale = 0.0f;
  int64_t key_splits = 0;
  std::vector<int32_t> head_rows;  // per KV head; empty: every row
};

std::vector<uint8_t> VisibleRows(const Case& c, uint64_t seed) {
  std::vector<uint8_t> visible(static_cast<size_t>(c.n_kv * c.kv_heads), 1);
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution hide(c.hidden);
  for (auto& v : visible) v = hide(rng) ? 0 : 1;
  return visible;
}

// o within 2e-5 (values lie in [-1, 1]; one key wrongly seen or missed among a thousand moves o
// by ~1e-3), lse within 1e-5 + 1e-6 relative, -inf exactly where the reference has it.
void ExpectAttentionMatches(const Case& c, uint64_t seed) {
  SCOPED_TRACE(::testing::Message()
               << "n_q " << c.n_q << " n_kv " << c.n_kv << " heads " << c.q_heads << "/"
               << c.kv_heads << " d " << c.head_dim << " offsets " << c.q_offset << "/"
               << c.k_offset << " splits " << c.key_splits);
  const HostTensor q = RandomTensor(DType::kF32, {c.n_q, c.q_heads, c.head_dim}, seed, -2, 2);
  const HostTensor k = RandomTensor(c.k_dtype, {c.n_kv, c.kv_heads, c.head_dim}, seed + 1, -2, 2);
  const HostTensor v = RandomTensor(c.v_dtype, {c.n_kv, c.kv_heads, c.head_dim}, seed + 2);
  const std::vector<uint8_t> visible = VisibleRows(c, seed + 3);
  AttentionArgs args;
  args.q = CView(q);
  args.k = CView(k);
  args.v = CView(v);
  args.q_offset = c.q_offset;
  args.k_offset = c.k_offset;
  args.mask = c.mask;
  args.scale = c.scale;
  args.kv_head_window = c.windows.empty() ? nullptr : c.windows.data();
  args.sink_tokens = c.sink;
  args.kv_row_visible = c.hidden > 0.0 ? visible.data() : nullptr;
  HostTensor head_rows(DType::kI32, {static_cast<int64_t>(c.head_rows.size())});
  std::copy(c.head_rows.begin(), c.head_rows.end(), head_rows.data<int32_t>());
  if (!c.head_rows.empty()) args.kv_head_rows = CView(head_rows);
  HostTensor ref_o = PoisonedF32({c.n_q, c.q_heads, c.head_dim});
  HostTensor ref_lse = PoisonedF32({c.n_q, c.q_heads});
  AttentionArgs ref = args;
  ref.o = ref_o.view();
  ref.lse = ref_lse.view();
  ASSERT_TRUE(AttentionRef(ref).ok());

  GuardedTensor gq(q), gk(k), gv(v);
  GuardedTensor o(PoisonedF32({c.n_q, c.q_heads, c.head_dim})),
      lse(PoisonedF32({c.n_q, c.q_heads}));
  AttentionArgs fast = args;
  fast.q = gq.cview();
  fast.k = gk.cview();
  fast.v = gv.cview();
  fast.o = o.view();
  fast.lse = c.lse ? lse.view() : TensorView{};
  AttentionCpuOptions options;
  options.key_splits = c.key_splits;
  ASSERT_TRUE(AttentionCpu(fast, options).ok());
  EXPECT_TRUE(gq.Unchanged(q));
  EXPECT_TRUE(gk.Unchanged(k));
  EXPECT_TRUE(gv.Unchanged(v));
  const HostTensor got_o = o.Read();
  EXPECT_TRUE(testing::AllFinite(got_o));
  EXPECT_TRUE(testing::AllClose(got_o, ref_o, 2e-5, 2e-5));
  const HostTensor got_lse = lse.Read();
  if (c.lse) {
    EXPECT_TRUE(testing::AllClose(got_lse, ref_lse, 1e-6, 1e-5));
  } else {
    for (const float x : ToFloats(got_lse)) ASSERT_TRUE(std::isnan(x)) << "lse written";
  }
}

TEST(AttentionCpuTest, CausalPrefillOverShapesAndDtypes) {
  uint64_t seed = 1;
  struct Heads {
    int64_t q, kv;
  };
  for (const Heads h : {Heads{2, 2}, Heads{8, 2}, Heads{8, 1}})
    for (const int64_t d : {16, 64, 80})
      for (const int64_t n : {1, 7, 65, 300}) {
        Case c;
        c.n_q = c.n_kv = n;
        c.q_heads = h.q;
        c.kv_heads = h.kv;
        c.head_dim = d;
        ExpectAttentionMatches(c, seed++);
        c.k_dtype = DType::kBF16;
        c.v_dtype = DType::kF16;
        ExpectAttentionMatches(c, seed++);
      }
}

TEST(AttentionCpuTest, OffsetsAndUnmasked) {
  Case c;
  c.q_heads = 8;
  c.kv_heads = 2;
  c.head_dim = 64;
  c.k_dtype = c.v_dtype = DType::kBF16;
  struct Offsets {
    int64_t n_q, n_kv, q_offset, k_offset;
  };
  // A query chunk after its keys, inside them, straddling their end, and wholly before them
  // (every row sees nothing: o = 0, lse = -inf).
  for (const Offsets o : {Offsets{33, 600, 700, 0}, Offsets{100, 700, 250, 0},
                          Offsets{70, 300, 1240, 1000}, Offsets{20, 50, 0, 100}})
    for (const AttentionMask mask : {AttentionMask::kCausal, AttentionMask::kNone}) {
      c.n_q = o.n_q;
      c.n_kv = o.n_kv;
      c.q_offset = o.q_offset;
      c.k_offset = o.k_offset;
      c.mask = mask;
      ExpectAttentionMatches(c, 50 + o.n_q);
    }
}

TEST(AttentionCpuTest, AShapeWindowsAndSinks) {
  Case c;
  c.q_heads = 8;
  c.kv_heads = 4;
  c.head_dim = 32;
  c.k_dtype = DType::kF16;
  c.n_q = 257;
  c.n_kv = 1500;
  c.q_offset = 1243;  // the last 257 positions of 1500 keys
  for (const int64_t sink : {0, 4, 300})
    for (const AttentionMask mask : {AttentionMask::kCausal, AttentionMask::kNone}) {
      // A dense head, a window inside one tile, one spanning tiles, one longer than the keys.
      c.windows = {0, 5, 700, 5000};
      c.sink = sink;
      c.mask = mask;
      ExpectAttentionMatches(c, 80 + sink);
    }
  // Queries in the middle of the keys, as a ring block or a chunk sees them.
  c.q_offset = 600;
  c.k_offset = 100;
  c.windows = {64, 1, 0, 300};
  c.sink = 130;
  ExpectAttentionMatches(c, 90);
}

TEST(AttentionCpuTest, HiddenKeyRows) {
  Case c;
  c.q_heads = 8;
  c.kv_heads = 2;
  c.head_dim = 64;
  c.n_q = 130;
  c.n_kv = 900;
  c.q_offset = 770;
  for (const double hidden : {0.3, 0.97, 1.0}) {
    c.hidden = hidden;
    c.windows.clear();
    ExpectAttentionMatches(c, 100);
    c.windows = {40, 0};
    c.sink = 8;
    ExpectAttentionMatches(c, 101);
  }
}

// Per-KV-head key counts (OmniKV's chosen rows padded to the longest head): decode over key
// splits and a prefill block, with heads that see none, some, all, and counts out of range.
TEST(AttentionCpuTest, PerHeadKeyCounts) {
  Case c;
  c.q_heads = 8;
  c.kv_heads = 4;
  c.head_dim = 64;
  c.k_dtype = c.v_dtype = DType::kBF16;
  c.n_kv = 700;
  c.head_rows = {0, 1, 699, 9000};
  c.mask = AttentionMask::kNone;
  c.q_offset = 5000;
  for (int64_t splits : {0, 1, 5}) {
    c.key_splits = splits;
    ExpectAttentionMatches(c, 110);
  }
  c.head_rows = {300, -4, 64, 65};
  c.n_q = 90;
  c.q_offset = 610;
  c.mask = AttentionMask::kCausal;
  c.key_splits = 0;
  ExpectAttentionMatches(c, 111);
}

TEST(AttentionCpuTest, KeySplitsMergeToTheWhole) {
  Case c;
  c.q_heads = 4;
  c.kv_heads = 1;
  c.head_dim = 64;
  c.k_dtype = c.v_dtype = DType::kBF16;
  for (const int64_t n_q : {1, 3})
    for (const int64_t splits : {1, 2, 3, 7}) {
      c.n_q = n_q;
      c.n_kv = 1000;
      c.q_offset = 1000 - n_q;
      c.key_splits = splits;
      ExpectAttentionMatches(c, 200 + splits);
    }
  // More splits than keys, some of them wholly masked for a windowed head.
  c.n_q = 2;
  c.n_kv = 5;
  c.q_offset = 3;
  c.key_splits = 9;
  c.windows = {2};
  ExpectAttentionMatches(c, 210);
}

TEST(AttentionCpuTest, NoLseAndExplicitScale) {
  Case c;
  c.n_q = 40;
  c.n_kv = 300;
  c.q_offset = 260;
  c.q_heads = 4;
  c.kv_heads = 2;
  c.lse = false;
  c.scale = 0.37f;
  ExpectAttentionMatches(c, 300);
  c.key_splits = 3;
  ExpectAttentionMatches(c, 301);
}

TEST(AttentionCpuTest, LargeEnoughToRunOnSeveralThreads) {
  Case c;
  c.n_q = 512;
  c.n_kv = 2048;
  c.q_offset = 2048 - 512;
  c.q_heads = 8;
  c.kv_heads = 2;
  c.head_dim = 64;
  c.k_dtype = c.v_dtype = DType::kBF16;
  ExpectAttentionMatches(c, 400);
}

TEST(AttentionCpuTest, EmptyQueriesOrKeys) {
  Case c;
  c.n_q = 0;
  c.n_kv = 10;
  ExpectAttentionMatches(c, 500);
  c.n_q = 6;
  c.n_kv = 0;
  ExpectAttentionMatches(c, 501);
}

TEST(AttentionCpuTest, RefusesWhatTheReferenceRefuses) {
  const HostTensor q = RandomTensor(DType::kF32, {4, 6, 16}, 1);
  const HostTensor k = RandomTensor(DType::kBF16, {9, 4, 16}, 2);  // 6 q heads over 4 kv heads
  const HostTensor k2 = RandomTensor(DType::kBF16, {9, 2, 16}, 2);
  const HostTensor v2 = RandomTensor(DType::kF64, {9, 2, 16}, 3);
  HostTensor o = PoisonedF32({4, 6, 16}), lse = PoisonedF32({4, 6});
  const int64_t bad_window[2] = {3, -1};
  std::vector<AttentionArgs> bad(4);
  bad[0] = {CView(q), CView(k), CView(k), 0, 0, AttentionMask::kCausal, 0.0f, o.view(), lse.view()};
  bad[1] = {CView(q), CView(k2), CView(v2), 0, 0, AttentionMask::kCausal,
            0.0f,     o.view(),  lse.view()};
  bad[2] = {CView(q), CView(k2), CView(k2), 0, 0, AttentionMask::kCausal,
            -1.0f,    o.view(),  lse.view()};
  bad[3] = {CView(q), CView(k2), CView(k2), 0, 0, AttentionMask::kCausal,
            0.0f,     o.view(),  lse.view()};
  bad[3].kv_head_window = bad_window;
  for (const AttentionArgs& args : bad) {
    const Status want = AttentionRef(args), got = AttentionCpu(args);
    EXPECT_FALSE(got.ok());
    EXPECT_EQ(got.ToString(), want.ToString());
  }
  AttentionArgs good = bad[3];
  good.kv_head_window = nullptr;
  AttentionCpuOptions options;
  options.key_splits = -1;
  EXPECT_FALSE(AttentionCpu(good, options).ok());
}

}  // namespace
}  // namespace millipede
