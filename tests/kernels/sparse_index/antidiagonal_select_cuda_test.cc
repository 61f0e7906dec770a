// AntidiagonalSelectCuda against AntidiagonalSelectRef: the masses within bf16 rounding of the
// reference's, and every kept bitmap exactly the keep rule applied to the kernel's own masses
// (AntidiagonalKeep), which is how the kernel may differ from the reference: only at the
// threshold's edge. Cases: GQA groups 1/4/8, KV dtypes F32/BF16/F16/F8_E4M3 and queries F32/BF16,
// strides 4/8/16 over blocks of 64/128, head_dim 32/64/128, odd lengths, queries holding part of
// their blocks in several runs, keys in several runs, a window of bitmap rows, heads not
// selected; rows the call does not score keep their contents. Skips without a GPU.
#include "kernels/sparse_index/antidiagonal_select_cuda.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/sparse_index/antidiagonal_select.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/op_harness.h"
#include "tests/kernels/sparse_index/sparse_index_test_util.h"

namespace millipede {
namespace {

using testing::DeviceTensor;
using testing::Rows3;

struct Case {
  int64_t kv_heads, group, head_dim, block, stride, length;
  DType q_dtype, k_dtype;
  int64_t q_begin;  // the queries hold positions [q_begin, length)
  uint64_t seed;
};

struct Inputs {
  HostTensor q, k, q_runs, k_runs, kept, mass;
  std::vector<int64_t> permille;
  int64_t qb_begin;
};

constexpr uint32_t kSentinel = 0x5a5a5a5au;

Inputs MakeInputs(const Case& c) {
  std::mt19937_64 rng(c.seed);
  const int64_t heads = c.kv_heads * c.group, nq = c.length - c.q_begin;
  Inputs in;
  in.q = testing::RandomTensor(c.q_dtype, {nq, heads, c.head_dim}, c.seed, -2.0f, 2.0f);
  in.k =
      testing::RandomTensor(c.k_dtype, {c.length, c.kv_heads, c.head_dim}, c.seed + 1, -2.0f, 2.0f);
  // Queries in two runs, the later positions first.
  const int64_t cut = c.q_begin + nq / 3;
  in.q_runs = cut > c.q_begin ? Rows3({c.q_begin, cut, c.length - cut, cut, c.length, 0})
                              : Rows3({c.q_begin, c.length, 0});
  // Keys in three runs, in reverse order.
  const int64_t a = c.length / 3, b = 2 * c.length / 3;
  in.k_runs = Rows3({0, a, c.length - a, a, b, c.length - b, b, c.length, 0});
  in.qb_begin = c.q_begin / c.block;
  const int64_t num_kb = (c.length + c.block - 1) / c.block, n_qb = num_kb - in.qb_begin;
  in.kept = HostTensor(DType::kI32, {c.kv_heads, n_qb, num_kb / 32 + 1});
  std::memset(in.kept.view().data, 0x5a, in.kept.NumBytes());
  in.mass = HostTensor(DType::kF32, {c.kv_heads, n_qb, num_kb});
  std::memset(in.mass.view().data, 0x5a, in.mass.NumBytes());
  const int64_t choices[] = {900, 0, 500, 1000, 950, 300};
  for (int64_t g = 0; g < c.kv_heads; ++g) in.permille.push_back(choices[(g + c.seed) % 6]);
  return in;
}

AntidiagonalSelectArgs ArgsOver(const Case& c, Inputs& in, ConstTensorView q, ConstTensorView k,
                                ConstTensorView q_runs, ConstTensorView k_runs, TensorView kept,
                                TensorView mass) {
  AntidiagonalSelectArgs a;
  a.q = q;
  a.q_runs = q_runs;
  a.k = k;
  a.k_runs = k_runs;
  a.length = c.length;
  a.block = c.block;
  a.stride = c.stride;
  a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  a.permille = in.permille.data();
  a.qb_begin = in.qb_begin;
  a.kept = kept;
  a.mass = mass;
  return a;
}

class AntidiagonalSelectCudaTest : public testing::GpuOpTest<Case> {};

TEST_P(AntidiagonalSelectCudaTest, MassesWithinRoundingAndTheKeepRuleExactly) {
  const Case c = GetParam();
  Inputs in = MakeInputs(c);
  HostTensor ref_kept(DType::kI32, in.kept.shape()), ref_mass(DType::kF32, in.mass.shape());
  std::memcpy(ref_kept.view().data, in.kept.view().data, in.kept.NumBytes());
  std::memcpy(ref_mass.view().data, in.mass.view().data, in.mass.NumBytes());
  const Status ref = AntidiagonalSelectRef(
      ArgsOver(c, in, testing::CView(in.q), testing::CView(in.k), testing::CView(in.q_runs),
               testing::CView(in.k_runs), ref_kept.view(), ref_mass.view()));
  ASSERT_TRUE(ref.ok()) << ref.ToString();
  DeviceTensor q(in.q), k(in.k), q_runs(in.q_runs), k_runs(in.k_runs), kept(in.kept), mass(in.mass);
  auto workspace = SparseIndexCudaWorkspace::Create();
  ASSERT_TRUE(workspace.ok());
  auto gemm = GemmCudaContext::Create();
  ASSERT_TRUE(gemm.ok());
  const Status s = AntidiagonalSelectCuda(ArgsOver(c, in, q.cview(), k.cview(), q_runs.cview(),
                                                   k_runs.cview(), kept.view(), mass.view()),
                                          **workspace, **gemm, nullptr);
  ASSERT_TRUE(s.ok()) << s.ToString();
  const HostTensor got_kept = kept.Read(), got_mass = mass.Read();
  const int64_t n_qb = in.kept.shape()[1], words = in.kept.shape()[2];
  const int64_t num_kb = in.mass.shape()[2];
  const auto* gk = reinterpret_cast<const uint32_t*>(got_kept.data<int32_t>());
  const auto* rk = reinterpret_cast<const uint32_t*>(ref_kept.data<int32_t>());
  int64_t rows = 0, differing = 0;
  double worst = 0;
  for (int64_t g = 0; g < c.kv_heads; ++g)
    for (int64_t i = 0; i < n_qb; ++i) {
      const int64_t row = g * n_qb + i, qb = in.qb_begin + i;
      const float* gm = got_mass.data<float>() + row * num_kb;
      const float* rm = ref_mass.data<float>() + row * num_kb;
      if (in.permille[g] == 0) {  // not selected: untouched
        for (int64_t w = 0; w < words; ++w) EXPECT_EQ(gk[row * words + w], kSentinel);
        continue;
      }
      ++rows;
      for (int64_t kb = 0; kb < num_kb; ++kb) {
        worst = std::max(worst, static_cast<double>(std::fabs(gm[kb] - rm[kb])));
        if (kb > qb) EXPECT_EQ(gm[kb], 0.0f);
      }
      std::vector<uint32_t> want(static_cast<size_t>(words), 0u);
      for (int64_t kb : AntidiagonalKeep(std::span<const float>(gm, num_kb), qb, in.permille[g]))
        want[kb / 32] |= 1u << (kb % 32);
      bool same_as_ref = true;
      for (int64_t w = 0; w < words; ++w) {
        EXPECT_EQ(gk[row * words + w], want[w]) << "head " << g << " query block " << qb;
        same_as_ref = same_as_ref && gk[row * words + w] == rk[row * words + w];
      }
      differing += !same_as_ref;
    }
  RecordProperty("worst_mass_error", std::to_string(worst));
  RecordProperty("rows_differing_from_reference", std::to_string(differing));
  EXPECT_LT(worst, 4e-3);
  // Near-ties at the threshold are rare: most rows pick exactly the reference's blocks.
  EXPECT_LE(differing * 4, rows) << differing << " of " << rows << " rows differ";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, AntidiagonalSelectCudaTest,
    ::testing::Values(Case{2, 1, 32, 64, 4, 333, DType::kF32, DType::kBF16, 0, 1},
                      Case{2, 4, 64, 64, 8, 700, DType::kF32, DType::kF16, 100, 2},
                      Case{1, 8, 128, 128, 8, 1000, DType::kF32, DType::kBF16, 130, 3},
                      Case{2, 4, 128, 128, 16, 1500, DType::kBF16, DType::kF8E4M3, 640, 4},
                      Case{3, 2, 64, 64, 16, 517, DType::kF32, DType::kF32, 3, 5},
                      Case{1, 4, 128, 64, 4, 2048, DType::kF32, DType::kBF16, 1024, 6}));

TEST(AntidiagonalSelectCudaErrors, AsOnTheCpu) {
  if (!testing::HaveGpu()) GTEST_SKIP() << "no CUDA device";
  Case c{1, 1, 32, 64, 4, 200, DType::kF32, DType::kBF16, 0, 9};
  Inputs in = MakeInputs(c);
  in.k_runs = Rows3({0, 90, 0, 100, 200, 90});  // key positions [90, 100) missing
  DeviceTensor q(in.q), k(in.k), q_runs(in.q_runs), k_runs(in.k_runs), kept(in.kept);
  auto workspace = SparseIndexCudaWorkspace::Create();
  ASSERT_TRUE(workspace.ok());
  auto gemm = GemmCudaContext::Create();
  ASSERT_TRUE(gemm.ok());
  in.permille = {900};
  Status s = AntidiagonalSelectCuda(
      ArgsOver(c, in, q.cview(), k.cview(), q_runs.cview(), k_runs.cview(), kept.view(), {}),
      **workspace, **gemm, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("is not in k"), std::string::npos) << s.message();
  c.stride = 8;
  c.block = 256;  // 32 reshaped rows per block: beyond the kernel
  Inputs wide = MakeInputs(c);
  wide.permille = {900};
  DeviceTensor wide_kept(wide.kept);
  s = AntidiagonalSelectCuda(
      ArgsOver(c, wide, q.cview(), k.cview(), q_runs.cview(), k_runs.cview(), wide_kept.view(), {}),
      **workspace, **gemm, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("a power of two <= 16"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace millipede
