// RmsNormCuda against RmsNormRef: weight dtypes, with and without the fused residual add, output
// aliasing x or the residual, odd hidden sizes (vectorised and scalar paths) and row counts,
// NaN and Inf rows, outputs NaN-poisoned between guard bands. Skips without a GPU.
#include "kernels/layer/rms_norm_cuda.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kernels/layer/rms_norm.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/op_harness.h"

namespace millipede {
namespace {

using testing::DeviceTensor;
using testing::HaveGpu;
using testing::OpCheck;
using testing::PoisonedF32;
using testing::RandomTensor;
using testing::Tolerance;

// The kernel sums squares in fp32 (the reference in double); the rest is the same fp32
// arithmetic, so a few ulps at most. NaN rows stay NaN on both sides.
const Tolerance kTolerance = Tolerance::Normalised(1e-5).WithNanMatchingNan();
// residual += x is one fp32 addition on both sides: bit-exact.
const Tolerance kResidualTolerance = Tolerance::Exact().WithNanMatchingNan();

enum class Alias { kNone, kOutIsX, kOutIsResidual };

struct Case {
  int64_t n, hidden;
  DType weight_dtype;
  bool residual;
  Alias alias = Alias::kNone;
  float eps = 1e-5f;
  size_t offset_bytes = 0;  // applied to x, residual and out
};

std::string Name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string name = detail::StrCat("n", c.n, "_h", c.hidden, "_", DTypeName(c.weight_dtype),
                                    c.residual ? "_residual" : "");
  if (c.alias == Alias::kOutIsX) name += "_out_is_x";
  if (c.alias == Alias::kOutIsResidual) name += "_out_is_residual";
  if (c.offset_bytes) name += "_unaligned";
  return name;
}

class RmsNormCudaTest : public testing::GpuOpTest<Case> {};

TEST_P(RmsNormCudaTest, MatchesReference) {
  const Case c = GetParam();
  const Shape shape{c.n, c.hidden};
  HostTensor x = RandomTensor(DType::kF32, shape, 31, -2.0f, 2.0f);
  // A NaN poisons its whole row; an Inf row normalises to 0 except the Inf itself (NaN).
  if (c.n > 2) {
    x.data<float>()[c.hidden] = testing::kNaN;
    x.data<float>()[2 * c.hidden] = testing::kInf;
  }
  OpCheck check("rms_norm");
  // x and the residual are outputs where the output aliases them.
  const int ix = c.alias == Alias::kOutIsX ? check.Output("x", x, kTolerance, c.offset_bytes)
                                           : check.Input(x, c.offset_bytes);
  const int iweight = check.Input(RandomTensor(c.weight_dtype, {c.hidden}, 32, 0.5f, 1.5f));
  int iresidual = -1;
  if (c.residual) {
    iresidual = check.Output("residual", RandomTensor(DType::kF32, shape, 33, -3.0f, 3.0f),
                             c.alias == Alias::kOutIsResidual ? kTolerance : kResidualTolerance,
                             c.offset_bytes);
  }
  const int iout = c.alias == Alias::kOutIsX ? ix
                   : c.alias == Alias::kOutIsResidual
                       ? iresidual
                       : check.Output("out", PoisonedF32(shape), kTolerance, c.offset_bytes);
  check.Run(
      [&](const OpCheck::Tensors& t) {
        RmsNormArgs args{t.cview(ix), t.cview(iweight), TensorView{}, t.view(iout), c.eps};
        if (c.residual) args.residual = t.view(iresidual);
        return args;
      },
      RmsNormRef, RmsNormCuda);
}

INSTANTIATE_TEST_SUITE_P(Shapes, RmsNormCudaTest,
                         ::testing::Values(Case{1, 4096, DType::kBF16, true},
                                           Case{63, 4097, DType::kF32, false},
                                           Case{65, 4100, DType::kF16, true, Alias::kOutIsResidual},
                                           Case{4097, 1024, DType::kBF16, true, Alias::kOutIsX},
                                           Case{4097, 7, DType::kF32, false},
                                           Case{2, 1, DType::kF32, true},
                                           Case{3, 8192, DType::kF64, true},
                                           Case{7, 63, DType::kBF16, false, Alias::kOutIsX, 1e-6f},
                                           Case{5, 5120, DType::kBF16, true, Alias::kNone, 0.0f},
                                           Case{9, 2048, DType::kF16, true, Alias::kNone, 1e-5f, 4},
                                           Case{1, 16384, DType::kF32, false}),
                         Name);

// A BF16/F16 output holds the kernel's F32 result rounded to nearest even, bit for bit (what the
// GEMM that reads it would otherwise have converted), on the vectorised and the scalar paths.
TEST(RmsNormCudaLowPrecisionTest, OutputIsTheRoundedF32Output) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  for (const int64_t hidden : {4096, 4100, 63}) {
    for (const DType dtype : {DType::kBF16, DType::kF16}) {
      for (const bool residual : {false, true}) {
        SCOPED_TRACE(detail::StrCat("hidden ", hidden, " ", DTypeName(dtype), " residual ",
                                    residual));
        const int64_t n = 3;
        const HostTensor x = RandomTensor(DType::kF32, {n, hidden}, 71, -2.0f, 2.0f);
        const HostTensor weight = RandomTensor(DType::kBF16, {hidden}, 72, 0.5f, 1.5f);
        const HostTensor r = RandomTensor(DType::kF32, {n, hidden}, 73, -3.0f, 3.0f);
        DeviceTensor d_x(x), d_weight(weight), d_r32(r), d_r16(r);
        DeviceTensor d_out32(PoisonedF32({n, hidden}));
        DeviceTensor d_out16(testing::Poisoned(dtype, {n, hidden}));
        RmsNormArgs args{d_x.cview(), d_weight.cview(), TensorView{}, d_out32.view(), 1e-5f};
        if (residual) args.residual = d_r32.view();
        ASSERT_TRUE(RmsNormCuda(args, nullptr).ok());
        args.out = d_out16.view();
        if (residual) args.residual = d_r16.view();
        const Status status = RmsNormCuda(args, nullptr);
        ASSERT_TRUE(status.ok()) << status.ToString();
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const HostTensor out32 = d_out32.Read(), out16 = d_out16.Read();
        HostTensor expected(dtype, {n, hidden});
        ASSERT_TRUE(ConvertFloats(out32.view().data, DType::kF32, expected.view().data, dtype,
                                  static_cast<size_t>(n * hidden))
                        .ok());
        ASSERT_TRUE(testing::AllFinite(out16));
        EXPECT_EQ(std::memcmp(out16.view().data, expected.view().data, expected.NumBytes()), 0);
        if (residual) {
          EXPECT_TRUE(d_r16.Unchanged(d_r32.Read()));
        }
      }
    }
  }
}

TEST(RmsNormCudaArgsTest, RejectsBadArgs) {
  std::vector<float> fake(64);
  RmsNormArgs args{{fake.data(), DType::kF32, {4, 8}},
                   {fake.data(), DType::kF32, {7}},
                   TensorView{},
                   {fake.data(), DType::kF32, {4, 8}}};
  Status status = RmsNormCuda(args, nullptr);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("rms_norm weight"), std::string::npos) << status.ToString();
  args.weight.shape = {8};
  args.eps = -1.0f;
  EXPECT_EQ(RmsNormCuda(args, nullptr).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace millipede
