// RopeCpu and RopeKvCpu against their references, bit for bit: positions far apart and out of
// order, GQA head counts, head dims, F32/BF16/F16 caches, guard bands and argument errors.
#include "kernels/cpu/rope_cpu.h"

#include <gtest/gtest.h>

#include <vector>

#include "kernels/cpu/rope_kv_cpu.h"
#include "tests/kernels/cpu/cpu_test_util.h"

namespace millipede {
namespace {

using testing::BitEqual;
using testing::CView;
using testing::GuardedTensor;
using testing::Poisoned;
using testing::RandomTensor;

HostTensor Positions(int64_t n, uint64_t seed) {
  HostTensor p(DType::kI64, {n});
  for (int64_t i = 0; i < n; ++i)
    p.data<int64_t>()[i] = static_cast<int64_t>((seed * 7919 + i * 104729) % 1000003);
  return p;
}

HostTensor InvFreq(int64_t head_dim) {
  StatusOr<std::vector<float>> f = RopeInvFreq(head_dim, 500000.0, RopeScaling{}, 0, 0);
  EXPECT_TRUE(f.ok());
  return testing::TensorOf(DType::kF32, {head_dim / 2}, *f);
}

TEST(RopeCpuTest, EqualsReferenceBitForBit) {
  for (const int64_t n : {1, 5, 200})
    for (const int64_t heads : {1, 8})
      for (const int64_t d : {2, 64, 80}) {
        const HostTensor x = RandomTensor(DType::kF32, {n, heads, d}, n + d);
        const HostTensor positions = Positions(n, heads), inv_freq = InvFreq(d);
        HostTensor ref = testing::CopyF32(x);
        ASSERT_TRUE(RopeRef({ref.view(), CView(positions), CView(inv_freq)}).ok());
        GuardedTensor got(x);
        ASSERT_TRUE(RopeCpu({got.view(), CView(positions), CView(inv_freq)}).ok());
        EXPECT_TRUE(BitEqual(got.Read(), ref));
      }
}

TEST(RopeKvCpuTest, EqualsReferenceBitForBit) {
  for (const DType cache : {DType::kF32, DType::kBF16, DType::kF16})
    for (const int64_t n : {1, 33, 150}) {
      const int64_t q_heads = 8, kv_heads = 2, d = 64;
      const HostTensor q = RandomTensor(DType::kF32, {n, q_heads, d}, n);
      const HostTensor k = RandomTensor(DType::kF32, {n, kv_heads, d}, n + 1);
      const HostTensor v = RandomTensor(DType::kF32, {n, kv_heads, d}, n + 2);
      const HostTensor positions = Positions(n, 3), inv_freq = InvFreq(d);
      HostTensor ref_q = testing::CopyF32(q);
      HostTensor ref_k = Poisoned(cache, {n, kv_heads, d}),
                 ref_v = Poisoned(cache, {n, kv_heads, d});
      ASSERT_TRUE(RopeKvRef({ref_q.view(), CView(k), CView(v), CView(positions), CView(inv_freq),
                             ref_k.view(), ref_v.view()})
                      .ok());
      GuardedTensor gq(q), gk(k), gv(v);
      GuardedTensor k_cache(Poisoned(cache, {n, kv_heads, d})),
          v_cache(Poisoned(cache, {n, kv_heads, d}));
      ASSERT_TRUE(RopeKvCpu({gq.view(), gk.cview(), gv.cview(), CView(positions), CView(inv_freq),
                             k_cache.view(), v_cache.view()})
                      .ok());
      EXPECT_TRUE(BitEqual(gq.Read(), ref_q));
      EXPECT_TRUE(gk.Unchanged(k));
      EXPECT_TRUE(gv.Unchanged(v));
      EXPECT_TRUE(BitEqual(k_cache.Read(), ref_k));
      EXPECT_TRUE(BitEqual(v_cache.Read(), ref_v));
    }
}

// Per-row destinations (decode tokens of several sequences), one row without any.
TEST(RopeKvCpuTest, PerRowDestinationsEqualReferenceBitForBit) {
  const int64_t n = 6, q_heads = 8, kv_heads = 2, d = 64;
  const Shape row{1, kv_heads, d};
  const HostTensor q = RandomTensor(DType::kF32, {n, q_heads, d}, 4);
  const HostTensor k = RandomTensor(DType::kF32, {n, kv_heads, d}, 5);
  const HostTensor v = RandomTensor(DType::kF32, {n, kv_heads, d}, 6);
  const HostTensor positions = Positions(n, 7), inv_freq = InvFreq(d);
  std::vector<HostTensor> ref_k, ref_v, got_k, got_v;
  for (int64_t t = 0; t < n; ++t)
    for (auto* out : {&ref_k, &ref_v, &got_k, &got_v}) out->push_back(Poisoned(DType::kBF16, row));
  auto rows = [&](std::vector<HostTensor>& out) {
    std::vector<TensorView> views;
    for (int64_t t = 0; t < n; ++t) views.push_back(t == 3 ? TensorView{} : out[t].view());
    return views;
  };
  HostTensor ref_q = testing::CopyF32(q), got_q = testing::CopyF32(q);
  const std::vector<TensorView> rk = rows(ref_k), rv = rows(ref_v), gk = rows(got_k),
                                gv = rows(got_v);
  RopeKvArgs ref{ref_q.view(), CView(k), CView(v), CView(positions), CView(inv_freq), {}, {}};
  ref.k_rows = rk;
  ref.v_rows = rv;
  RopeKvArgs got = ref;
  got.q = got_q.view();
  got.k_rows = gk;
  got.v_rows = gv;
  ASSERT_TRUE(RopeKvRef(ref).ok());
  ASSERT_TRUE(RopeKvCpu(got).ok());
  EXPECT_TRUE(BitEqual(got_q, ref_q));
  for (int64_t t = 0; t < n; ++t) {
    EXPECT_TRUE(BitEqual(got_k[t], ref_k[t])) << t;
    EXPECT_TRUE(BitEqual(got_v[t], ref_v[t])) << t;
  }
}

TEST(RopeKvCpuTest, RefusesWhatTheReferenceRefuses) {
  HostTensor q = RandomTensor(DType::kF32, {3, 4, 16}, 1);
  const HostTensor k = RandomTensor(DType::kF32, {3, 2, 16}, 2);
  const HostTensor positions = Positions(3, 1), inv_freq = InvFreq(16);
  HostTensor k_cache(DType::kI32, {3, 2, 16}), v_cache(DType::kBF16, {3, 2, 16});
  const RopeKvArgs args{q.view(),        CView(k),       CView(k),      CView(positions),
                        CView(inv_freq), k_cache.view(), v_cache.view()};
  EXPECT_FALSE(RopeKvCpu(args).ok());
  EXPECT_EQ(RopeKvCpu(args).ToString(), RopeKvRef(args).ToString());
  HostTensor odd = RandomTensor(DType::kF32, {3, 4, 15}, 1);
  const RopeArgs rope{odd.view(), CView(positions), CView(inv_freq)};
  EXPECT_EQ(RopeCpu(rope).ToString(), RopeRef(rope).ToString());
  EXPECT_FALSE(RopeCpu(rope).ok());
}

}  // namespace
}  // namespace millipede
