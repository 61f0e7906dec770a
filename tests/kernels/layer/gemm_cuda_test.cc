// GemmCuda against GemmRef: BF16, F16 and F32 weights, bias of several dtypes, accumulate, k = 0,
// odd m, n and k (cuBLASLt's unaligned algorithms), views that start off 256-byte alignment, one
// context reused over growing and shrinking shapes; outputs NaN-poisoned (or holding the values
// to accumulate into) between guard bands. Skips without a GPU.
//
// Two references per case: GemmRef on the F32 activations bounds the whole error of the GPU path
// (for 16-bit weights dominated by rounding the activations to the weight's dtype), and GemmRef
// on activations rounded the same way first isolates cuBLASLt's fp32 accumulation, which must be
// as tight as an FP32 GEMM.
#include "kernels/layer/gemm_cuda.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/layer/gemm.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/op_harness.h"

namespace millipede {
namespace {

using testing::CopyF32;
using testing::CView;
using testing::DeviceTensor;
using testing::HaveGpu;
using testing::MatchesReference;
using testing::OpCheck;
using testing::PoisonedF32;
using testing::RandomTensor;
using testing::RoundedThrough;
using testing::Support;
using testing::Tolerance;

// max |out - ref| / max |ref| against the reference on the F32 activations. Rounding a to BF16
// (relative 2^-9) or F16 (2^-11) perturbs each output by ~1e-3 or ~3e-4 of max |out|.
double MaxErrorVsFp32Activations(DType weight_dtype) {
  switch (weight_dtype) {
    case DType::kBF16: return 1e-2;
    case DType::kF16: return 2e-3;
    default: return 1e-5;
  }
}
// Against the reference on the rounded activations only the fp32 summation differs.
constexpr double kMaxAccumulationError = 1e-5;

struct Case {
  int64_t m, n, k;
  DType dtype;
  bool bias = false;
  DType bias_dtype = DType::kF32;
  bool accumulate = false;
  // Shifts a, b and out by this many of their elements off 256-byte alignment.
  int64_t offset_elements = 0;
  // Weights cuBLASLt has no GEMM for: reported as unsupported, checked if that changes.
  Support support = Support::kRequired;
  // Nonzero: b is columns [col0, col0 + k) of a [n, ldb] weight (GemmArgs::b_row_stride).
  int64_t ldb = 0, col0 = 0;
};

std::string Name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string name = detail::StrCat("m", c.m, "_n", c.n, "_k", c.k, "_", DTypeName(c.dtype));
  if (c.bias) name += std::string("_bias") + DTypeName(c.bias_dtype);
  if (c.accumulate) name += "_accumulate";
  if (c.offset_elements) name += "_unaligned";
  if (c.ldb) name += detail::StrCat("_columns", c.col0, "of", c.ldb);
  return name;
}

// Runs one case on `context` and checks it against both references.
void CheckCase(const Case& c, GemmCudaContext& context, uint64_t seed) {
  const HostTensor a = RandomTensor(DType::kF32, {c.m, c.k}, seed, -1.0f, 1.0f);
  const HostTensor out_init = c.accumulate
                                  ? RandomTensor(DType::kF32, {c.m, c.n}, seed + 3, -4.0f, 4.0f)
                                  : PoisonedF32({c.m, c.n});
  const size_t offset = static_cast<size_t>(c.offset_elements);
  OpCheck check("gemm");
  const int ia = check.Input(a, offset * sizeof(float));
  const int64_t ldb = c.ldb > 0 ? c.ldb : c.k;
  const int ib = check.Input(RandomTensor(c.dtype, {c.n, ldb}, seed + 1, -1.0f, 1.0f),
                             offset * DTypeSize(c.dtype));
  // The [n, k] columns the product reads, with the whole weight's row stride.
  auto weight = [&](ConstTensorView whole) {
    return ConstTensorView{static_cast<const char*>(whole.data) + c.col0 * DTypeSize(c.dtype),
                           c.dtype, Shape{c.n, c.k}};
  };
  const int ibias =
      c.bias ? check.Input(RandomTensor(c.bias_dtype, {c.n}, seed + 2, -1.0f, 1.0f)) : -1;
  const int iout =
      check.Output("out", out_init, Tolerance::Normalised(MaxErrorVsFp32Activations(c.dtype)),
                   offset * sizeof(float));
  auto make_args = [&](const OpCheck::Tensors& t) {
    return GemmArgs{t.cview(ia), weight(t.cview(ib)),
                    c.bias ? t.cview(ibias) : ConstTensorView{}, t.view(iout), c.accumulate,
                    c.ldb};
  };
  const bool compared = check.Run(
      make_args, GemmRef,
      [&](const GemmArgs& args, cudaStream_t stream) { return GemmCuda(args, context, stream); },
      c.support);
  if (!compared) return;

  // The second reference: activations rounded to the weights' dtype first.
  const HostTensor a_rounded = RoundedThrough(a, c.dtype);
  HostTensor out_rounded_ref = CopyF32(out_init);
  GemmArgs rounded{CView(a_rounded), weight(CView(check.expected(ib))), ConstTensorView{},
                   out_rounded_ref.view(), c.accumulate, c.ldb};
  if (c.bias) rounded.bias = CView(check.expected(ibias));
  ASSERT_TRUE(GemmRef(rounded).ok());
  EXPECT_TRUE(MatchesReference(check.actual(iout), out_rounded_ref,
                               Tolerance::Normalised(kMaxAccumulationError), "out_rounded"));
}

std::unique_ptr<GemmCudaContext> NewContext() {
  StatusOr<std::unique_ptr<GemmCudaContext>> context = GemmCudaContext::Create();
  EXPECT_TRUE(context.ok()) << context.status().ToString();
  return context.ok() ? std::move(*context) : nullptr;
}

class GemmCudaTest : public testing::GpuOpTest<Case> {};

TEST_P(GemmCudaTest, MatchesReference) {
  std::unique_ptr<GemmCudaContext> context = NewContext();
  ASSERT_NE(context, nullptr);
  CheckCase(GetParam(), *context, 61);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GemmCudaTest,
    ::testing::Values(
        Case{1, 4096, 4096, DType::kBF16}, Case{63, 1000, 4097, DType::kBF16, true, DType::kBF16},
        Case{65, 257, 512, DType::kF16, true, DType::kF32, true}, Case{4097, 96, 136, DType::kBF16},
        Case{7, 130, 63, DType::kF32, true, DType::kF32},
        Case{1, 33, 7, DType::kF32, false, DType::kF32, true},
        Case{64, 512, 1024, DType::kF32, true, DType::kF16},
        Case{5, 77, 129, DType::kBF16, true, DType::kF64, true}, Case{1, 1, 1, DType::kBF16},
        Case{3, 5, 0, DType::kBF16, true, DType::kF32, true}, Case{2, 3, 0, DType::kF32},
        Case{9, 40, 64, DType::kF32, false, DType::kF32, false, 1},
        Case{9, 40, 64, DType::kBF16, true, DType::kBF16, true, 1},
        Case{17, 300, 200, DType::kF16, false, DType::kF32, false, 3},
        Case{5, 77, 129, DType::kF64, true, DType::kF32, false, 0, Support::kOptional},
        // Skinny products (decode: one row on a kernel of its own; 2-4 rows on cuBLASLt): bias
        // and accumulation, an unaligned k % 8 and an unaligned base (both to cuBLASLt), a row
        // count past the warps of a block.
        Case{2, 6144, 4096, DType::kBF16, true, DType::kBF16},
        Case{3, 1003, 1024, DType::kF16, false, DType::kF32, true},
        Case{4, 4096, 14336, DType::kBF16, false, DType::kF32, true},
        Case{1, 28672, 4096, DType::kBF16, true, DType::kF32, true},
        Case{4, 9, 4104, DType::kBF16, false, DType::kF32, false, 8},
        Case{1, 100, 4100, DType::kBF16}, Case{2, 100, 4104, DType::kF16, false, DType::kF32, false, 1},
        // Column blocks of a wider weight (decode's MLP split over ranks: down_proj[:, c0:c1]):
        // one row on the skinny kernel, several on cuBLASLt, strides and starts off alignment
        // (to cuBLASLt's unaligned algorithms) and F32.
        Case{1, 4096, 7168, DType::kBF16, false, DType::kF32, true, 0, Support::kRequired, 14336,
             7168},
        Case{1, 300, 3584, DType::kBF16, true, DType::kBF16, false, 0, Support::kRequired, 14336,
             3584 * 3},
        Case{4, 4096, 7168, DType::kBF16, false, DType::kF32, true, 0, Support::kRequired, 14336,
             0},
        Case{1, 77, 64, DType::kF16, false, DType::kF32, true, 0, Support::kRequired, 131, 3},
        Case{9, 50, 40, DType::kF16, true, DType::kF32, false, 0, Support::kRequired, 96, 56},
        Case{3, 70, 33, DType::kF32, true, DType::kF32, true, 0, Support::kRequired, 100, 67}),
    Name);

// Activations given already rounded to the weight's dtype (as RMSNorm and SiLU-mul write them
// for the engine) skip the conversion kernel and give the same bits as the F32 activations.
TEST(GemmCudaRoundedActivationsTest, SameBitsAsF32Activations) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  std::unique_ptr<GemmCudaContext> context = NewContext();
  ASSERT_NE(context, nullptr);
  const std::vector<Case> cases = {{1, 6144, 4096, DType::kBF16, true, DType::kBF16},
                                   {1, 28672, 4096, DType::kBF16},
                                   {1, 4096, 14336, DType::kBF16, false, DType::kF32, true},
                                   {37, 300, 129, DType::kF16, true, DType::kF32},
                                   {1, 33, 7, DType::kF16}};
  uint64_t seed = 110;
  for (const Case& c : cases) {
    SCOPED_TRACE(Name(::testing::TestParamInfo<Case>(c, 0)));
    seed += 10;
    const HostTensor a = RandomTensor(DType::kF32, {c.m, c.k}, seed, -1.0f, 1.0f);
    HostTensor a_rounded(c.dtype, {c.m, c.k});
    ASSERT_TRUE(ConvertFloats(a.view().data, DType::kF32, a_rounded.view().data, c.dtype,
                              static_cast<size_t>(c.m * c.k))
                    .ok());
    const HostTensor b = RandomTensor(c.dtype, {c.n, c.k}, seed + 1, -1.0f, 1.0f);
    const HostTensor bias = c.bias ? RandomTensor(c.bias_dtype, {c.n}, seed + 2, -1.0f, 1.0f)
                                   : HostTensor(DType::kF32, {0});
    const HostTensor out_init = c.accumulate
                                    ? RandomTensor(DType::kF32, {c.m, c.n}, seed + 3, -4.0f, 4.0f)
                                    : PoisonedF32({c.m, c.n});
    DeviceTensor d_a(a), d_a_rounded(a_rounded), d_b(b), d_bias(bias);
    DeviceTensor d_out(out_init), d_out_rounded(out_init);
    GemmArgs args{d_a.cview(), d_b.cview(), ConstTensorView{}, d_out.view(), c.accumulate};
    if (c.bias) args.bias = d_bias.cview();
    ASSERT_TRUE(GemmCuda(args, *context, nullptr).ok());
    args.a = d_a_rounded.cview();
    args.out = d_out_rounded.view();
    const Status status = GemmCuda(args, *context, nullptr);
    ASSERT_TRUE(status.ok()) << status.ToString();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const HostTensor out = d_out.Read(), out_rounded = d_out_rounded.Read();
    ASSERT_TRUE(testing::AllFinite(out_rounded));
    EXPECT_EQ(std::memcmp(out.view().data, out_rounded.view().data, out.NumBytes()), 0);
    EXPECT_TRUE(d_a_rounded.Unchanged(a_rounded));
  }
  // BF16 activations with F16 weights are refused.
  std::vector<float> fake(64);
  GemmArgs mixed{{fake.data(), DType::kBF16, {2, 4}},
                 {fake.data(), DType::kF16, {3, 4}},
                 {},
                 {fake.data(), DType::kF32, {2, 3}}};
  EXPECT_EQ(GemmCuda(mixed, *context, nullptr).code(), StatusCode::kInvalidArgument);
}

TEST(GemmCudaContextTest, ReusedAcrossShapes) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  std::unique_ptr<GemmCudaContext> context = NewContext();
  ASSERT_NE(context, nullptr);
  // Growing m makes the activation scratch grow; repeats hit the cached plans.
  const std::vector<Case> cases = {
      {1, 256, 512, DType::kBF16},     {32, 256, 512, DType::kBF16},
      {1000, 256, 512, DType::kBF16},  {1, 256, 512, DType::kBF16},
      {1000, 256, 512, DType::kF16},   {1000, 256, 512, DType::kF32, true},
      {2000, 128, 1024, DType::kBF16}, {32, 256, 512, DType::kBF16, false, DType::kF32, true},
  };
  uint64_t seed = 70;
  for (const Case& c : cases) {
    SCOPED_TRACE(Name(::testing::TestParamInfo<Case>(c, 0)));
    CheckCase(c, *context, seed += 10);
  }
}

TEST(GemmCudaContextTest, ReserveThenRun) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  std::unique_ptr<GemmCudaContext> context = NewContext();
  ASSERT_NE(context, nullptr);
  ASSERT_TRUE(context->Reserve(300 * 700, nullptr).ok());
  CheckCase({300, 64, 700, DType::kBF16}, *context, 90);
}

TEST(GemmCudaArgsTest, RejectsBadArgs) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  std::unique_ptr<GemmCudaContext> context = NewContext();
  ASSERT_NE(context, nullptr);
  // Host memory stands in for device memory: both fail before anything is launched.
  std::vector<double> fake(64);
  GemmArgs args{{fake.data(), DType::kF32, {2, 4}},
                {fake.data(), DType::kF32, {3, 5}},
                {},
                {fake.data(), DType::kF32, {2, 3}}};
  Status status = GemmCuda(args, *context, nullptr);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("gemm b"), std::string::npos) << status.ToString();
  args.b = {fake.data(), DType::kF64, {3, 4}};
  status = GemmCuda(args, *context, nullptr);
  EXPECT_EQ(status.code(), StatusCode::kUnimplemented) << status.ToString();
}

}  // namespace
}  // namespace millipede
