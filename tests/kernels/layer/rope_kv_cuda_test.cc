// RopeKvCuda against RopeCuda + ConvertCuda (bit for bit: the same device rotation, the same
// rounding) and against RopeKvRef: GQA ratios, head dims, cache dtypes, row counts, positions past
// 2^24, and the decode layout where q | k | v are one GEMM output row. Outputs start poisoned
// between guard bands; the inputs k and v must stay unchanged. Skips without a GPU.
#include "kernels/layer/rope_kv_cuda.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/layer/rope_cuda.h"
#include "kernels/layer/rope_kv.h"
#include "kernels/memory/convert_cuda.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/op_harness.h"

namespace millipede {
namespace {

using testing::CView;
using testing::DeviceTensor;
using testing::HaveGpu;
using testing::MatchesReference;
using testing::OpCheck;
using testing::Poisoned;
using testing::RandomTensor;
using testing::SameElementBytes;
using testing::Tolerance;

// Against the reference: RopeCuda's tolerance (sincosf within 2 ulp), plus the cache rounding
// (compared through the same rounding of the reference).
constexpr double kMaxError = 1e-5;

struct Case {
  int64_t n, q_heads, kv_heads, head_dim;
  DType cache;
  int64_t max_position;
};

std::string Name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return detail::StrCat("n", c.n, "_q", c.q_heads, "_kv", c.kv_heads, "_d", c.head_dim, "_",
                        DTypeName(c.cache), "_pos", c.max_position);
}

HostTensor InvFreq(int64_t head_dim) {
  RopeScaling scaling;
  scaling.type = RopeScalingType::kLlama3;
  scaling.factor = 8.0;
  scaling.original_max_position_embeddings = 8192;
  StatusOr<std::vector<float>> inv = RopeInvFreq(head_dim, 500000.0, scaling, 8192, 0);
  EXPECT_TRUE(inv.ok()) << inv.status().ToString();
  return testing::TensorOf(DType::kF32, {head_dim / 2}, *inv);
}

HostTensor Positions(int64_t n, int64_t max_position) {
  HostTensor positions(DType::kI64, {n});
  std::mt19937_64 rng(43);
  std::uniform_int_distribution<int64_t> dist(0, max_position - 1);
  for (int64_t t = 0; t < n; ++t) positions.data<int64_t>()[t] = dist(rng);
  positions.data<int64_t>()[n - 1] = max_position - 1;
  return positions;
}

class RopeKvCudaTest : public testing::GpuOpTest<Case> {};

TEST_P(RopeKvCudaTest, MatchesRopeThenConvert) {
  const Case c = GetParam();
  const Shape q_shape{c.n, c.q_heads, c.head_dim}, kv_shape{c.n, c.kv_heads, c.head_dim};
  const HostTensor q = RandomTensor(DType::kF32, q_shape, 91, -2.0f, 2.0f);
  const HostTensor k = RandomTensor(DType::kF32, kv_shape, 92, -2.0f, 2.0f);

  // Against the reference. One rounding step of the cache dtype may differ where the F32 values
  // differ by an ulp; V is only converted, so it must be exact.
  const double cache_error = c.cache == DType::kF8E4M3 ? 1.3e-1
                             : c.cache == DType::kBF16 ? 1e-2
                             : c.cache == DType::kF16  ? 1e-3
                                                       : kMaxError;
  OpCheck check("rope_kv");
  const int iq = check.Output("q", q, Tolerance::Normalised(kMaxError));
  const int ik = check.Input(k);
  const int iv = check.Input(RandomTensor(DType::kF32, kv_shape, 93, -2.0f, 2.0f));
  const int ipositions = check.Input(Positions(c.n, c.max_position));
  const int iinv_freq = check.Input(InvFreq(c.head_dim));
  const int ik_cache =
      check.Output("k_cache", Poisoned(c.cache, kv_shape), Tolerance::Normalised(cache_error));
  const int iv_cache = check.Output("v_cache", Poisoned(c.cache, kv_shape), Tolerance::Exact());
  ASSERT_TRUE(check.Run(
      [&](const OpCheck::Tensors& t) {
        return RopeKvArgs{t.view(iq),          t.cview(ik),        t.cview(iv),
                          t.cview(ipositions), t.cview(iinv_freq), t.view(ik_cache),
                          t.view(iv_cache)};
      },
      RopeKvRef, RopeKvCuda));
  const HostTensor& q_out = check.actual(iq);
  const HostTensor& k_cache = check.actual(ik_cache);
  const HostTensor& v_cache = check.actual(iv_cache);
  ASSERT_TRUE(testing::AllFinite(k_cache));
  ASSERT_TRUE(testing::AllFinite(v_cache));
  EXPECT_TRUE(SameElementBytes(v_cache, check.expected(iv_cache)));

  // The separate ops the engine ran before, bit for bit: RoPE on q, RoPE on k, two conversions.
  DeviceTensor d_q2(q), d_k2(k);
  DeviceTensor d_k_cache2(Poisoned(c.cache, kv_shape)), d_v_cache2(Poisoned(c.cache, kv_shape));
  const ConstTensorView positions = check.device(ipositions).cview();
  const ConstTensorView inv_freq = check.device(iinv_freq).cview();
  ASSERT_TRUE(RopeCuda({d_q2.view(), positions, inv_freq}, nullptr).ok());
  ASSERT_TRUE(RopeCuda({d_k2.view(), positions, inv_freq}, nullptr).ok());
  ASSERT_TRUE(ConvertCuda(d_k2.cview(), d_k_cache2.view(), nullptr).ok());
  ASSERT_TRUE(ConvertCuda(check.device(iv).cview(), d_v_cache2.view(), nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(SameElementBytes(q_out, d_q2.Read()));
  EXPECT_TRUE(SameElementBytes(k_cache, d_k_cache2.Read()));
  EXPECT_TRUE(SameElementBytes(v_cache, d_v_cache2.Read()));
}

INSTANTIATE_TEST_SUITE_P(Shapes, RopeKvCudaTest,
                         ::testing::Values(Case{1, 32, 8, 128, DType::kBF16, 131072},
                                           Case{1, 28, 4, 128, DType::kF16, 1 << 20},
                                           Case{63, 32, 8, 128, DType::kBF16, 8192},
                                           Case{65, 8, 8, 64, DType::kF32, 4096},
                                           Case{4097, 4, 2, 16, DType::kBF16, 1 << 17},
                                           Case{3, 2, 1, 2, DType::kF16, 100},
                                           Case{63, 32, 8, 128, DType::kF8E4M3, 8192},
                                           Case{2, 28, 4, 128, DType::kF8E4M3, 1 << 20},
                                           // Decode rows split into slices of two heads, two
                                           // of which straddle the query/key and key/value
                                           // boundaries.
                                           Case{2, 31, 4, 64, DType::kBF16, 5000},
                                           Case{7, 40, 8, 80, DType::kBF16, (1 << 25) + 7}),
                         Name);

// The decode layout: q | k | v of one token are one row of a fused GEMM's output, rotated and
// stored by one call on views into that row.
TEST(RopeKvCudaDecodeTest, ViewsIntoOneQkvRow) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  const int64_t q_heads = 32, kv_heads = 8, head_dim = 128;
  const int64_t q_width = q_heads * head_dim, kv_width = kv_heads * head_dim;
  const HostTensor qkv = RandomTensor(DType::kF32, {1, q_width + 2 * kv_width}, 94);
  const HostTensor inv_freq = InvFreq(head_dim);
  const HostTensor positions = Positions(1, 131072);
  DeviceTensor d_qkv(qkv), d_positions(positions), d_inv_freq(inv_freq);
  const Shape kv_shape{1, kv_heads, head_dim};
  DeviceTensor d_k_cache(Poisoned(DType::kBF16, kv_shape));
  DeviceTensor d_v_cache(Poisoned(DType::kBF16, kv_shape));
  const TensorView row = d_qkv.view();
  const TensorView q{row.data, DType::kF32, {1, q_heads, head_dim}};
  const ConstTensorView k{static_cast<const float*>(row.data) + q_width, DType::kF32, kv_shape};
  const ConstTensorView v{static_cast<const float*>(row.data) + q_width + kv_width, DType::kF32,
                          kv_shape};
  ASSERT_TRUE(RopeKvCuda({q, k, v, d_positions.cview(), d_inv_freq.cview(), d_k_cache.view(),
                          d_v_cache.view()},
                         nullptr)
                  .ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  // The reference on host copies of the three parts.
  HostTensor q_ref(DType::kF32, {1, q_heads, head_dim}), k_ref(DType::kF32, kv_shape),
      v_ref(DType::kF32, kv_shape);
  std::memcpy(q_ref.view().data, qkv.view().data, q_width * sizeof(float));
  std::memcpy(k_ref.view().data, qkv.data<float>() + q_width, kv_width * sizeof(float));
  std::memcpy(v_ref.view().data, qkv.data<float>() + q_width + kv_width, kv_width * sizeof(float));
  HostTensor k_cache_ref = Poisoned(DType::kBF16, kv_shape);
  HostTensor v_cache_ref = Poisoned(DType::kBF16, kv_shape);
  ASSERT_TRUE(RopeKvRef({q_ref.view(), CView(k_ref), CView(v_ref), CView(positions),
                         CView(inv_freq), k_cache_ref.view(), v_cache_ref.view()})
                  .ok());
  const HostTensor row_out = d_qkv.Read();
  HostTensor q_out(DType::kF32, {1, q_heads, head_dim});
  std::memcpy(q_out.view().data, row_out.view().data, q_width * sizeof(float));
  EXPECT_TRUE(MatchesReference(q_out, q_ref, Tolerance::Normalised(kMaxError), "q"));
  // k and v in the row are inputs: unchanged.
  EXPECT_EQ(std::memcmp(row_out.data<float>() + q_width, qkv.data<float>() + q_width,
                        2 * kv_width * sizeof(float)),
            0);
  EXPECT_TRUE(
      MatchesReference(d_k_cache.Read(), k_cache_ref, Tolerance::Normalised(1e-2), "k_cache"));
  EXPECT_TRUE(SameElementBytes(d_v_cache.Read(), v_cache_ref));
}

// Per-row destinations: up to 300 decode tokens (three launches of 128), each stored in an
// allocation of its own or (every fifth) not at all, against the reference.
TEST(RopeKvCudaRowsTest, PerRowDestinationsMatchReference) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  for (int64_t n : {1, 5, 300}) {
    const int64_t q_heads = 32, kv_heads = 8, head_dim = 128;
    const Shape row_shape{1, kv_heads, head_dim};
    OpCheck check("rope_kv rows");
    const int iq = check.Output("q", RandomTensor(DType::kF32, {n, q_heads, head_dim}, 91),
                                Tolerance::Normalised(kMaxError));
    const int ik = check.Input(RandomTensor(DType::kF32, {n, kv_heads, head_dim}, 92));
    const int iv = check.Input(RandomTensor(DType::kF32, {n, kv_heads, head_dim}, 93));
    const int ipositions = check.Input(Positions(n, 1 << 20));
    const int iinv_freq = check.Input(InvFreq(head_dim));
    std::vector<int> k_out, v_out;
    for (int64_t t = 0; t < n; ++t) {
      const bool stored = t % 5 != 4;
      k_out.push_back(stored ? check.Output("k_row", Poisoned(DType::kBF16, row_shape),
                                            Tolerance::Normalised(1e-2))
                             : -1);
      v_out.push_back(stored ? check.Output("v_row", Poisoned(DType::kBF16, row_shape),
                                            Tolerance::Exact())
                             : -1);
    }
    std::vector<TensorView> k_rows, v_rows;  // refilled for each side
    ASSERT_TRUE(check.Run(
        [&](const OpCheck::Tensors& t) {
          k_rows.clear();
          v_rows.clear();
          for (int64_t r = 0; r < n; ++r) {
            k_rows.push_back(k_out[r] >= 0 ? t.view(k_out[r]) : TensorView{});
            v_rows.push_back(v_out[r] >= 0 ? t.view(v_out[r]) : TensorView{});
          }
          RopeKvArgs a{t.view(iq),          t.cview(ik),        t.cview(iv),
                       t.cview(ipositions), t.cview(iinv_freq), {},
                       {}};
          a.k_rows = k_rows;
          a.v_rows = v_rows;
          return a;
        },
        RopeKvRef, RopeKvCuda))
        << "n = " << n;
  }
}

// Whole caches and rows read on the device (RopeKvArgs::cache_rows): each token lands at its row,
// the other rows keep their values; a row outside its cache is not written.
TEST(RopeKvCudaRowsTest, CacheRowsMatchReference) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  const int64_t q_heads = 32, kv_heads = 8, head_dim = 128;
  const std::vector<int64_t> sizes = {5000, 3, 1, 130}, rows = {4999, 0, 0, 7};
  const int64_t n = static_cast<int64_t>(sizes.size());
  OpCheck check("rope_kv cache rows");
  const int iq = check.Output("q", RandomTensor(DType::kF32, {n, q_heads, head_dim}, 71),
                              Tolerance::Normalised(kMaxError));
  const int ik = check.Input(RandomTensor(DType::kF32, {n, kv_heads, head_dim}, 72));
  const int iv = check.Input(RandomTensor(DType::kF32, {n, kv_heads, head_dim}, 73));
  const int ipositions = check.Input(Positions(n, 1 << 20));
  const int iinv_freq = check.Input(InvFreq(head_dim));
  HostTensor cache_rows(DType::kI64, {n});
  std::copy(rows.begin(), rows.end(), cache_rows.data<int64_t>());
  const int irows = check.Input(std::move(cache_rows));
  std::vector<int> k_out, v_out;
  for (int64_t t = 0; t < n; ++t) {
    const Shape shape{sizes[t], kv_heads, head_dim};
    k_out.push_back(check.Output("k_cache", RandomTensor(DType::kBF16, shape, 80 + t),
                                 Tolerance::Normalised(1e-2)));
    v_out.push_back(
        check.Output("v_cache", RandomTensor(DType::kBF16, shape, 90 + t), Tolerance::Exact()));
  }
  std::vector<TensorView> k_rows, v_rows;
  ASSERT_TRUE(check.Run(
      [&](const OpCheck::Tensors& t) {
        k_rows.clear();
        v_rows.clear();
        for (int64_t r = 0; r < n; ++r) {
          k_rows.push_back(t.view(k_out[r]));
          v_rows.push_back(t.view(v_out[r]));
        }
        RopeKvArgs a{t.view(iq),          t.cview(ik),        t.cview(iv),
                     t.cview(ipositions), t.cview(iinv_freq), {},
                     {}};
        a.k_rows = k_rows;
        a.v_rows = v_rows;
        a.cache_rows = t.cview(irows);
        return a;
      },
      RopeKvRef, RopeKvCuda));
}

TEST(RopeKvCudaArgsTest, RejectsBadShapes) {
  std::vector<float> fake(256);
  RopeKvArgs args{{fake.data(), DType::kF32, {2, 4, 8}}, {fake.data(), DType::kF32, {2, 2, 8}},
                  {fake.data(), DType::kF32, {2, 2, 4}}, {fake.data(), DType::kI64, {2}},
                  {fake.data(), DType::kF32, {4}},       {fake.data(), DType::kBF16, {2, 2, 8}},
                  {fake.data(), DType::kBF16, {2, 2, 8}}};
  Status status = RopeKvCuda(args, nullptr);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("rope_kv v"), std::string::npos) << status.ToString();
  args.v.shape = {2, 2, 8};
  args.k_cache.dtype = DType::kI32;
  status = RopeKvCuda(args, nullptr);
  EXPECT_NE(status.message().find("rope_kv k_cache"), std::string::npos) << status.ToString();
}

}  // namespace
}  // namespace millipede
