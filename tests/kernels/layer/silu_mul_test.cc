#include "kernels/layer/silu_mul.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/kernels/kernel_test_util.h"

namespace millipede {
namespace {

using testing::AllClose;
using testing::AllFinite;
using testing::CView;
using testing::Poisoned;
using testing::PoisonedF32;
using testing::RandomTensor;
using testing::TensorOf;
using testing::ToFloats;

TEST(SiluMulTest, HandValues) {
  // silu(0) = 0; silu(x) = x * sigmoid(x); sigmoid(ln 3) = 3/4, sigmoid(-ln 3) = 1/4.
  const float ln3 = std::log(3.0f);
  HostTensor gate = TensorOf(DType::kF32, {1, 4}, {0.0f, ln3, -ln3, -200.0f});
  HostTensor up = TensorOf(DType::kF32, {1, 4}, {5.0f, 2.0f, 4.0f, 7.0f});
  HostTensor out = PoisonedF32({1, 4});
  ASSERT_TRUE(SiluMulRef({CView(gate), CView(up), out.view()}).ok());
  EXPECT_TRUE(
      AllClose(ToFloats(out), {0.0f, ln3 * 0.75f * 2.0f, -ln3 * 0.25f * 4.0f, 0.0f}, 1e-6, 1e-30));
}

TEST(SiluMulTest, MatchesFormulaOnRandomInputsAndRunsInPlace) {
  const int64_t n = 7, inter = 45;
  HostTensor gate = RandomTensor(DType::kF32, {n, inter}, 1, -8.0f, 8.0f);
  HostTensor up = RandomTensor(DType::kF32, {n, inter}, 2, -3.0f, 3.0f);
  HostTensor out = PoisonedF32({n, inter});
  ASSERT_TRUE(SiluMulRef({CView(gate), CView(up), out.view()}).ok());
  ASSERT_TRUE(AllFinite(out));
  std::vector<float> expected(n * inter);
  for (int64_t i = 0; i < n * inter; ++i) {
    const float g = gate.data<float>()[i];
    expected[i] = g / (1.0f + std::exp(-g)) * up.data<float>()[i];
  }
  EXPECT_TRUE(AllClose(ToFloats(out), expected, 1e-6, 1e-7));

  // out aliasing gate.
  ASSERT_TRUE(SiluMulRef({CView(gate), CView(up), gate.view()}).ok());
  EXPECT_TRUE(AllClose(ToFloats(gate), ToFloats(out), 0.0));
}

// A BF16/F16 output is the F32 result rounded to nearest even.
TEST(SiluMulTest, LowPrecisionOutputIsTheRoundedF32Output) {
  const int64_t n = 3, inter = 50;
  HostTensor gate = RandomTensor(DType::kF32, {n, inter}, 3, -8.0f, 8.0f);
  HostTensor up = RandomTensor(DType::kF32, {n, inter}, 4, -3.0f, 3.0f);
  HostTensor f32 = PoisonedF32({n, inter});
  ASSERT_TRUE(SiluMulRef({CView(gate), CView(up), f32.view()}).ok());
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    HostTensor low = Poisoned(dtype, {n, inter}), expected(dtype, {n, inter});
    ASSERT_TRUE(SiluMulRef({CView(gate), CView(up), low.view()}).ok());
    ASSERT_TRUE(ConvertFloats(f32.view().data, DType::kF32, expected.view().data, dtype,
                              static_cast<size_t>(n * inter)).ok());
    ASSERT_TRUE(AllFinite(low));
    EXPECT_EQ(ToFloats(low), ToFloats(expected)) << DTypeName(dtype);
  }
  HostTensor out(DType::kI32, {n, inter});
  EXPECT_EQ(SiluMulRef({CView(gate), CView(up), out.view()}).code(),
            StatusCode::kInvalidArgument);
}

TEST(SiluMulTest, RejectsMismatchedShapes) {
  HostTensor gate = RandomTensor(DType::kF32, {2, 3}, 1);
  HostTensor up = RandomTensor(DType::kF32, {2, 4}, 2);
  HostTensor out = PoisonedF32({2, 3});
  EXPECT_EQ(SiluMulRef({CView(gate), CView(up), out.view()}).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace millipede
