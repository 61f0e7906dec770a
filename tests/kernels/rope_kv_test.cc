#include "kernels/rope_kv.h"

#include <gtest/gtest.h>

#include <vector>

#include "kernels/convert.h"
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

}  // namespace
}  // namespace millipede
