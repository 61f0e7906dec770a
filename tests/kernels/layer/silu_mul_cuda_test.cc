// SiluMulCuda against SiluMulRef: row and width sizes around the 4-wide vector path (odd counts,
// unaligned buffers), output aliasing gate or up, NaN/Inf/huge inputs, outputs NaN-poisoned
// between guard bands. Skips without a GPU.
#include "kernels/layer/silu_mul_cuda.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kernels/layer/silu_mul.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/op_harness.h"

namespace millipede {
namespace {

using testing::DeviceTensor;
using testing::HaveGpu;
using testing::kInf;
using testing::kNaN;
using testing::OpCheck;
using testing::PoisonedF32;
using testing::RandomTensor;
using testing::Tolerance;

// fp32 expf (2 ulp) and an IEEE division against the reference's double arithmetic; NaN inputs
// give NaN on both sides.
const Tolerance kTolerance = Tolerance::Normalised(1e-5).WithNanMatchingNan();

enum class Alias { kNone, kOutIsGate, kOutIsUp };

struct Case {
  int64_t n, inter;
  Alias alias = Alias::kNone;
  size_t offset_bytes = 0;  // applied to gate, up and out
};

std::string Name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string name = detail::StrCat("n", c.n, "_i", c.inter);
  if (c.alias == Alias::kOutIsGate) name += "_out_is_gate";
  if (c.alias == Alias::kOutIsUp) name += "_out_is_up";
  if (c.offset_bytes) name += "_unaligned";
  return name;
}

class SiluMulCudaTest : public testing::GpuOpTest<Case> {};

TEST_P(SiluMulCudaTest, MatchesReference) {
  const Case c = GetParam();
  const Shape shape{c.n, c.inter};
  HostTensor gate = RandomTensor(DType::kF32, shape, 51, -12.0f, 12.0f);
  HostTensor up = RandomTensor(DType::kF32, shape, 52, -3.0f, 3.0f);
  // silu's edges: NaN, both infinities, exp overflow (-100 gives -0 in fp32) and its mirror.
  const std::vector<float> specials = {kNaN, kInf, -kInf, -100.0f, 100.0f, 0.0f};
  for (size_t i = 0; i < specials.size() && static_cast<int64_t>(i) < gate.NumElements(); ++i)
    gate.data<float>()[i] = specials[i];
  if (up.NumElements() > 7) up.data<float>()[7] = -kInf;

  OpCheck check("silu_mul");
  // gate or up is an output where the output aliases it.
  const int igate = c.alias == Alias::kOutIsGate
                        ? check.Output("gate", gate, kTolerance, c.offset_bytes)
                        : check.Input(gate, c.offset_bytes);
  const int iup = c.alias == Alias::kOutIsUp ? check.Output("up", up, kTolerance, c.offset_bytes)
                                             : check.Input(up, c.offset_bytes);
  const int iout = c.alias == Alias::kOutIsGate ? igate
                   : c.alias == Alias::kOutIsUp
                       ? iup
                       : check.Output("out", PoisonedF32(shape), kTolerance, c.offset_bytes);
  check.Run(
      [&](const OpCheck::Tensors& t) {
        return SiluMulArgs{t.cview(igate), t.cview(iup), t.view(iout)};
      },
      SiluMulRef, SiluMulCuda);
}

INSTANTIATE_TEST_SUITE_P(Shapes, SiluMulCudaTest,
                         ::testing::Values(Case{1, 11008}, Case{63, 14336}, Case{65, 4097},
                                           Case{4097, 64}, Case{1, 1}, Case{3, 7},
                                           Case{4097, 13, Alias::kOutIsGate},
                                           Case{17, 1024, Alias::kOutIsUp},
                                           Case{9, 256, Alias::kNone, 4},
                                           Case{5, 4095, Alias::kOutIsGate, 8}),
                         Name);

// A BF16/F16 output holds the kernel's F32 result rounded to nearest even, bit for bit, on the
// vectorised and the scalar paths.
TEST(SiluMulCudaLowPrecisionTest, OutputIsTheRoundedF32Output) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  for (const int64_t inter : {14336, 4097, 13}) {
    for (const DType dtype : {DType::kBF16, DType::kF16}) {
      SCOPED_TRACE(detail::StrCat("inter ", inter, " ", DTypeName(dtype)));
      const int64_t n = 2;
      const HostTensor gate = RandomTensor(DType::kF32, {n, inter}, 81, -12.0f, 12.0f);
      const HostTensor up = RandomTensor(DType::kF32, {n, inter}, 82, -3.0f, 3.0f);
      DeviceTensor d_gate(gate), d_up(up), d_out32(PoisonedF32({n, inter}));
      DeviceTensor d_out16(testing::Poisoned(dtype, {n, inter}));
      ASSERT_TRUE(SiluMulCuda({d_gate.cview(), d_up.cview(), d_out32.view()}, nullptr).ok());
      const Status status = SiluMulCuda({d_gate.cview(), d_up.cview(), d_out16.view()}, nullptr);
      ASSERT_TRUE(status.ok()) << status.ToString();
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const HostTensor out32 = d_out32.Read(), out16 = d_out16.Read();
      HostTensor expected(dtype, {n, inter});
      ASSERT_TRUE(ConvertFloats(out32.view().data, DType::kF32, expected.view().data, dtype,
                                static_cast<size_t>(n * inter))
                      .ok());
      ASSERT_TRUE(testing::AllFinite(out16));
      EXPECT_EQ(std::memcmp(out16.view().data, expected.view().data, expected.NumBytes()), 0);
      EXPECT_TRUE(d_gate.Unchanged(gate));
      EXPECT_TRUE(d_up.Unchanged(up));
    }
  }
}

TEST(SiluMulCudaArgsTest, RejectsBadShapes) {
  std::vector<float> fake(64);
  SiluMulArgs args{{fake.data(), DType::kF32, {2, 8}},
                   {fake.data(), DType::kF32, {2, 7}},
                   {fake.data(), DType::kF32, {2, 8}}};
  const Status status = SiluMulCuda(args, nullptr);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("silu_mul up"), std::string::npos) << status.ToString();
}

}  // namespace
}  // namespace millipede
