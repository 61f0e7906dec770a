#include "kernels/layer/rope_kv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "kernels/memory/convert.h"
#include "tests/kernels/kernel_test_util.h"

namespace millipede {
namespace {

using testing::AllFinite;
using testing::CopyF32;
using testing::CView;
using testing::Poisoned;
using testing::RandomTensor;
using testing::TensorOf;
using testing::ToFloats;

HostTensor Positions(const std::vector<int64_t>& p) {
  HostTensor t(DType::kI64, {static_cast<int64_t>(p.size())});
  for (size_t i = 0; i < p.size(); ++i) t.data<int64_t>()[i] = p[i];
  return t;
}

HostTensor InvFreq(int64_t head_dim) {
  StatusOr<std::vector<float>> inv = RopeInvFreq(head_dim, 5e5, RopeScaling{}, 0, 0);
  EXPECT_TRUE(inv.ok()) << inv.status().ToString();
  return TensorOf(DType::kF32, {head_dim / 2}, *inv);
}

// RopeKv is RopeRef on q, and RopeRef on (a copy of) k then conversions into the cache rows:
// bit for bit, for every cache dtype, with the inputs k and v left as they were.
TEST(RopeKvTest, EqualsRopeThenConvert) {
  const int64_t n = 5, q_heads = 8, kv_heads = 2, head_dim = 16;
  const HostTensor positions = Positions({0, 7, 4096, 123456, (int64_t{1} << 24) + 3});
  const HostTensor inv_freq = InvFreq(head_dim);
  for (DType cache : {DType::kF32, DType::kBF16, DType::kF16}) {
    HostTensor q = RandomTensor(DType::kF32, {n, q_heads, head_dim}, 1);
    const HostTensor k = RandomTensor(DType::kF32, {n, kv_heads, head_dim}, 2);
    const HostTensor v = RandomTensor(DType::kF32, {n, kv_heads, head_dim}, 3);
    const HostTensor k_before = CopyF32(k), v_before = CopyF32(v);
    HostTensor k_cache = Poisoned(cache, {n, kv_heads, head_dim});
    HostTensor v_cache = Poisoned(cache, {n, kv_heads, head_dim});
    HostTensor q_expected = CopyF32(q), k_rotated = CopyF32(k);
    ASSERT_TRUE(RopeKvRef({q.view(), CView(k), CView(v), CView(positions), CView(inv_freq),
                           k_cache.view(), v_cache.view()})
                    .ok());
    ASSERT_TRUE(RopeRef({q_expected.view(), CView(positions), CView(inv_freq)}).ok());
    ASSERT_TRUE(RopeRef({k_rotated.view(), CView(positions), CView(inv_freq)}).ok());
    HostTensor k_expected(cache, {n, kv_heads, head_dim}),
        v_expected(cache, {n, kv_heads, head_dim});
    ASSERT_TRUE(ConvertRef(CView(k_rotated), k_expected.view()).ok());
    ASSERT_TRUE(ConvertRef(CView(v), v_expected.view()).ok());
    ASSERT_TRUE(AllFinite(k_cache));
    ASSERT_TRUE(AllFinite(v_cache));
    EXPECT_EQ(ToFloats(q), ToFloats(q_expected)) << DTypeName(cache);
    EXPECT_EQ(ToFloats(k_cache), ToFloats(k_expected)) << DTypeName(cache);
    EXPECT_EQ(ToFloats(v_cache), ToFloats(v_expected)) << DTypeName(cache);
    EXPECT_EQ(ToFloats(k), ToFloats(k_before));
    EXPECT_EQ(ToFloats(v), ToFloats(v_before));
  }
}

// Queries and keys of one row rotate alike: a key equal to a query head gets that head's values
// (what lets a decode step rotate q | k of one GEMM output in one call).
TEST(RopeKvTest, QueriesAndKeysRotateAlike) {
  const int64_t head_dim = 8;
  HostTensor q = RandomTensor(DType::kF32, {2, 3, head_dim}, 4);
  HostTensor k(DType::kF32, {2, 1, head_dim});
  for (int64_t t = 0; t < 2; ++t)
    for (int64_t i = 0; i < head_dim; ++i)
      k.data<float>()[t * head_dim + i] = q.data<float>()[(t * 3 + 1) * head_dim + i];
  HostTensor v = RandomTensor(DType::kF32, {2, 1, head_dim}, 5);
  HostTensor k_cache = Poisoned(DType::kF32, {2, 1, head_dim});
  HostTensor v_cache = Poisoned(DType::kF32, {2, 1, head_dim});
  const HostTensor positions = Positions({3, 1000});
  const HostTensor inv_freq = InvFreq(head_dim);
  ASSERT_TRUE(RopeKvRef({q.view(), CView(k), CView(v), CView(positions), CView(inv_freq),
                         k_cache.view(), v_cache.view()})
                  .ok());
  for (int64_t t = 0; t < 2; ++t)
    for (int64_t i = 0; i < head_dim; ++i)
      EXPECT_EQ(k_cache.data<float>()[t * head_dim + i],
                q.data<float>()[(t * 3 + 1) * head_dim + i]);
  EXPECT_EQ(ToFloats(v_cache), ToFloats(v));
}

TEST(RopeKvTest, RejectsBadArguments) {
  const int64_t head_dim = 8;
  HostTensor q = RandomTensor(DType::kF32, {2, 4, head_dim}, 1);
  HostTensor k = RandomTensor(DType::kF32, {2, 2, head_dim}, 2);
  HostTensor v = RandomTensor(DType::kF32, {2, 2, head_dim}, 3);
  HostTensor v_short = RandomTensor(DType::kF32, {1, 2, head_dim}, 3);
  HostTensor k_wide = RandomTensor(DType::kF32, {2, 2, 2 * head_dim}, 2);
  HostTensor cache = Poisoned(DType::kBF16, {2, 2, head_dim});
  HostTensor cache2 = Poisoned(DType::kBF16, {2, 2, head_dim});
  HostTensor cache_f64(DType::kF64, {2, 2, head_dim});
  const HostTensor positions = Positions({1, 2});
  const HostTensor inv_freq = InvFreq(head_dim);
  auto run = [&](const HostTensor& k_in, const HostTensor& v_in, HostTensor& kc, HostTensor& vc) {
    return RopeKvRef({q.view(), CView(k_in), CView(v_in), CView(positions), CView(inv_freq),
                      kc.view(), vc.view()});
  };
  EXPECT_TRUE(run(k, v, cache, cache2).ok());
  EXPECT_EQ(run(k, v_short, cache, cache2).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(run(k_wide, v, cache, cache2).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(run(k, v, cache_f64, cache2).code(), StatusCode::kInvalidArgument);
  HostTensor cache_short = Poisoned(DType::kBF16, {1, 2, head_dim});
  EXPECT_EQ(run(k, v, cache, cache_short).code(), StatusCode::kInvalidArgument);
}

// Per-row destinations (the decode tokens of several sequences, each in its own cache): row t is
// the contiguous op's row t, bit for bit; a row without destinations only rotates its query and
// writes nothing.
TEST(RopeKvTest, PerRowDestinationsEqualTheContiguousRows) {
  const int64_t n = 4, q_heads = 8, kv_heads = 2, head_dim = 16;
  const Shape row_shape{1, kv_heads, head_dim};
  const HostTensor positions = Positions({3, 0, 900, 17});
  const HostTensor inv_freq = InvFreq(head_dim);
  const HostTensor q0 = RandomTensor(DType::kF32, {n, q_heads, head_dim}, 1);
  const HostTensor k = RandomTensor(DType::kF32, {n, kv_heads, head_dim}, 2);
  const HostTensor v = RandomTensor(DType::kF32, {n, kv_heads, head_dim}, 3);
  // The contiguous op as the expectation.
  HostTensor q_expected = CopyF32(q0);
  HostTensor k_cache = Poisoned(DType::kBF16, {n, kv_heads, head_dim});
  HostTensor v_cache = Poisoned(DType::kBF16, {n, kv_heads, head_dim});
  ASSERT_TRUE(RopeKvRef({q_expected.view(), CView(k), CView(v), CView(positions),
                         CView(inv_freq), k_cache.view(), v_cache.view()})
                  .ok());
  {
    HostTensor q = CopyF32(q0);
    std::vector<HostTensor> k_out, v_out;
    for (int64_t t = 0; t < n; ++t) {
      k_out.push_back(Poisoned(DType::kBF16, row_shape));
      v_out.push_back(Poisoned(DType::kBF16, row_shape));
    }
    std::vector<TensorView> k_rows, v_rows;
    for (int64_t t = 0; t < n; ++t) {
      const bool stored = t != 2;  // row 2 belongs to a token another rank stores
      k_rows.push_back(stored ? k_out[t].view() : TensorView{});
      v_rows.push_back(stored ? v_out[t].view() : TensorView{});
    }
    RopeKvArgs a{q.view(), CView(k), CView(v), CView(positions), CView(inv_freq), {}, {}};
    a.k_rows = k_rows;
    a.v_rows = v_rows;
    ASSERT_TRUE(RopeKvRef(a).ok());
    EXPECT_EQ(ToFloats(q), ToFloats(q_expected));
    const std::vector<float> k_all = ToFloats(k_cache), v_all = ToFloats(v_cache);
    const size_t row = static_cast<size_t>(kv_heads * head_dim);
    for (int64_t t = 0; t < n; ++t) {
      const std::vector<float> kt = ToFloats(k_out[t]), vt = ToFloats(v_out[t]);
      if (t == 2) {
        EXPECT_FALSE(AllFinite(k_out[t]));  // still the poison: nothing written
        EXPECT_FALSE(AllFinite(v_out[t]));
        continue;
      }
      EXPECT_EQ(kt, std::vector<float>(k_all.begin() + t * row, k_all.begin() + (t + 1) * row));
      EXPECT_EQ(vt, std::vector<float>(v_all.begin() + t * row, v_all.begin() + (t + 1) * row));
    }
  }
}

// With cache_rows each destination is a whole cache and the token goes to its row there: the
// same values as a per-row call into that row, every other row untouched; a row outside its
// cache is OutOfRange and writes nothing.
TEST(RopeKvTest, CacheRowsPlaceEachTokenAtItsRow) {
  const int64_t n = 3, q_heads = 8, kv_heads = 2, head_dim = 16;
  const HostTensor positions = Positions({5, 0, 77});
  const HostTensor inv_freq = InvFreq(head_dim);
  const HostTensor q0 = RandomTensor(DType::kF32, {n, q_heads, head_dim}, 1);
  const HostTensor k = RandomTensor(DType::kF32, {n, kv_heads, head_dim}, 2);
  const HostTensor v = RandomTensor(DType::kF32, {n, kv_heads, head_dim}, 3);
  const std::vector<int64_t> sizes = {6, 3, 1}, rows = {5, 0, 0};
  auto caches = [&](uint64_t seed) {
    std::vector<HostTensor> out;
    for (int64_t t = 0; t < n; ++t)
      out.push_back(RandomTensor(DType::kBF16, {sizes[t], kv_heads, head_dim}, seed + t));
    return out;
  };
  // Expected: per-row destinations that are slices of the same initial caches.
  std::vector<HostTensor> k_exp = caches(10), v_exp = caches(20);
  HostTensor q_exp = CopyF32(q0);
  std::vector<TensorView> k_rows, v_rows;
  for (int64_t t = 0; t < n; ++t) {
    k_rows.push_back(SliceRows(k_exp[t].view(), rows[t], 1));
    v_rows.push_back(SliceRows(v_exp[t].view(), rows[t], 1));
  }
  RopeKvArgs a{q_exp.view(), CView(k), CView(v), CView(positions), CView(inv_freq), {}, {}};
  a.k_rows = k_rows;
  a.v_rows = v_rows;
  ASSERT_TRUE(RopeKvRef(a).ok());

  std::vector<HostTensor> k_got = caches(10), v_got = caches(20);
  HostTensor q = CopyF32(q0);
  HostTensor cache_rows(DType::kI64, {n});
  std::copy(rows.begin(), rows.end(), cache_rows.data<int64_t>());
  k_rows.clear();
  v_rows.clear();
  for (int64_t t = 0; t < n; ++t) {
    k_rows.push_back(k_got[t].view());
    v_rows.push_back(v_got[t].view());
  }
  a.q = q.view();
  a.k_rows = k_rows;
  a.v_rows = v_rows;
  a.cache_rows = CView(cache_rows);
  ASSERT_TRUE(RopeKvRef(a).ok());
  EXPECT_EQ(ToFloats(q), ToFloats(q_exp));
  for (int64_t t = 0; t < n; ++t) {
    EXPECT_EQ(ToFloats(k_got[t]), ToFloats(k_exp[t])) << t;
    EXPECT_EQ(ToFloats(v_got[t]), ToFloats(v_exp[t])) << t;
  }
  // Row 1 points past its 3-row cache.
  cache_rows.data<int64_t>()[1] = 3;
  std::vector<HostTensor> k_bad = caches(10);
  k_rows[1] = k_bad[1].view();
  a.k_rows = k_rows;
  EXPECT_EQ(RopeKvRef(a).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(ToFloats(k_bad[1]), ToFloats(caches(10)[1]));
  // Checked: I64 rows, one per token, and whole caches of the row width.
  HostTensor wrong(DType::kI32, {n});
  a.cache_rows = CView(wrong);
  EXPECT_EQ(RopeKvCheckArgs(a).code(), StatusCode::kInvalidArgument);
  RopeKvArgs contiguous{q.view(), CView(k), CView(v), CView(positions), CView(inv_freq),
                        k_got[0].view(), v_got[0].view()};
  contiguous.cache_rows = CView(cache_rows);
  EXPECT_EQ(RopeKvCheckArgs(contiguous).code(), StatusCode::kInvalidArgument);
}

TEST(RopeKvTest, PerRowDestinationsAreChecked) {
  const int64_t n = 2, heads = 2, head_dim = 8;
  HostTensor q = RandomTensor(DType::kF32, {n, heads, head_dim}, 1);
  const HostTensor k = RandomTensor(DType::kF32, {n, heads, head_dim}, 2);
  const HostTensor positions = Positions({1, 2});
  const HostTensor inv_freq = InvFreq(head_dim);
  HostTensor a0 = Poisoned(DType::kBF16, {1, heads, head_dim});
  HostTensor a1 = Poisoned(DType::kBF16, {1, heads, head_dim});
  HostTensor wrong_dtype = Poisoned(DType::kF16, {1, heads, head_dim});
  HostTensor wrong_shape = Poisoned(DType::kBF16, {2, heads, head_dim});
  HostTensor cache = Poisoned(DType::kBF16, {n, heads, head_dim});
  auto check = [&](std::vector<TensorView> k_rows, std::vector<TensorView> v_rows,
                   TensorView k_cache = {}) {
    RopeKvArgs a{q.view(), CView(k), CView(k), CView(positions), CView(inv_freq), k_cache, {}};
    a.k_rows = k_rows;
    a.v_rows = v_rows;
    return RopeKvCheckArgs(a).code();
  };
  EXPECT_EQ(check({a0.view(), a1.view()}, {a1.view(), a0.view()}), StatusCode::kOk);
  EXPECT_EQ(check({TensorView{}, a1.view()}, {TensorView{}, a0.view()}), StatusCode::kOk);
  EXPECT_EQ(check({a0.view()}, {a1.view()}), StatusCode::kInvalidArgument);  // too few
  EXPECT_EQ(check({a0.view(), TensorView{}}, {a1.view(), a0.view()}),
            StatusCode::kInvalidArgument);  // K without V
  EXPECT_EQ(check({a0.view(), wrong_dtype.view()}, {a1.view(), a0.view()}),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(check({a0.view(), wrong_shape.view()}, {a1.view(), a0.view()}),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(check({a0.view(), a1.view()}, {a1.view(), a0.view()}, cache.view()),
            StatusCode::kInvalidArgument);  // both modes at once
}

}  // namespace
}  // namespace millipede
