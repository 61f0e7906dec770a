#include "kernels/layer/rms_norm.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/kernels/kernel_test_util.h"

namespace millipede {
namespace {

using testing::AllClose;
using testing::AllFinite;
using testing::CopyF32;
using testing::CView;
using testing::Poisoned;
using testing::PoisonedF32;
using testing::RandomTensor;
using testing::TensorOf;
using testing::ToFloats;

TEST(RmsNormTest, HandValues) {
  // Row (3, 4): mean of squares 12.5, rms sqrt(12.5 + eps). Row (1, 1): rms = sqrt(1 + eps).
  HostTensor x = TensorOf(DType::kF32, {2, 2}, {3.0f, 4.0f, 1.0f, -1.0f});
  HostTensor weight = TensorOf(DType::kBF16, {2}, {2.0f, 0.5f});
  HostTensor out = PoisonedF32({2, 2});
  const float eps = 0.5f;
  ASSERT_TRUE(RmsNormRef({CView(x), CView(weight), {}, out.view(), eps}).ok());
  const double r0 = std::sqrt(12.5 + 0.5), r1 = std::sqrt(1.0 + 0.5);
  EXPECT_TRUE(AllClose(ToFloats(out),
                       {static_cast<float>(2 * 3 / r0), static_cast<float>(0.5 * 4 / r0),
                        static_cast<float>(2 * 1 / r1), static_cast<float>(-0.5 * 1 / r1)},
                       1e-6));
}

// out = x / sqrt(mean(x^2) + eps) * w, the formula straight from the paper, in double.
std::vector<float> Expected(const std::vector<float>& x, const std::vector<float>& w, int64_t n,
                            int64_t hidden, double eps) {
  std::vector<float> out(n * hidden);
  for (int64_t r = 0; r < n; ++r) {
    double ms = 0.0;
    for (int64_t j = 0; j < hidden; ++j) ms += double(x[r * hidden + j]) * x[r * hidden + j];
    const double rms = std::sqrt(ms / hidden + eps);
    for (int64_t j = 0; j < hidden; ++j)
      out[r * hidden + j] = static_cast<float>(x[r * hidden + j] / rms * w[j]);
  }
  return out;
}

TEST(RmsNormTest, MatchesFormulaForEveryWeightDtype) {
  const int64_t n = 5, hidden = 96;
  HostTensor x = RandomTensor(DType::kF32, {n, hidden}, 1, -3.0f, 3.0f);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    HostTensor weight = RandomTensor(dtype, {hidden}, 2, 0.5f, 1.5f);
    HostTensor out = PoisonedF32({n, hidden});
    ASSERT_TRUE(RmsNormRef({CView(x), CView(weight), {}, out.view(), 1e-6f}).ok());
    ASSERT_TRUE(AllFinite(out));
    EXPECT_TRUE(AllClose(ToFloats(out), Expected(ToFloats(x), ToFloats(weight), n, hidden, 1e-6),
                         3e-7, 1e-7));
  }
}

TEST(RmsNormTest, FusedResidualAddsThenNormalises) {
  const int64_t n = 4, hidden = 64;
  HostTensor x = RandomTensor(DType::kF32, {n, hidden}, 3);
  HostTensor residual = RandomTensor(DType::kF32, {n, hidden}, 4, -5.0f, 5.0f);
  HostTensor weight = RandomTensor(DType::kBF16, {hidden}, 5, 0.5f, 1.5f);
  std::vector<float> sum(n * hidden);
  for (int64_t i = 0; i < n * hidden; ++i) sum[i] = residual.data<float>()[i] + x.data<float>()[i];

  HostTensor out = PoisonedF32({n, hidden});
  ASSERT_TRUE(RmsNormRef({CView(x), CView(weight), residual.view(), out.view(), 1e-5f}).ok());
  EXPECT_EQ(ToFloats(residual), sum);
  EXPECT_TRUE(
      AllClose(ToFloats(out), Expected(sum, ToFloats(weight), n, hidden, 1e-5), 3e-7, 1e-7));
}

TEST(RmsNormTest, InPlaceEqualsOutOfPlace) {
  const int64_t n = 3, hidden = 40;
  HostTensor x = RandomTensor(DType::kF32, {n, hidden}, 6);
  HostTensor weight = RandomTensor(DType::kF32, {hidden}, 7);
  HostTensor out = PoisonedF32({n, hidden});
  ASSERT_TRUE(RmsNormRef({CView(x), CView(weight), {}, out.view()}).ok());
  HostTensor in_place = CopyF32(x);
  ASSERT_TRUE(RmsNormRef({CView(in_place), CView(weight), {}, in_place.view()}).ok());
  EXPECT_EQ(ToFloats(in_place), ToFloats(out));

  // Fused form writing the output over x.
  HostTensor residual = RandomTensor(DType::kF32, {n, hidden}, 8);
  HostTensor residual2 = CopyF32(residual);
  HostTensor x2 = CopyF32(x);
  ASSERT_TRUE(RmsNormRef({CView(x), CView(weight), residual.view(), out.view()}).ok());
  ASSERT_TRUE(RmsNormRef({CView(x2), CView(weight), residual2.view(), x2.view()}).ok());
  EXPECT_EQ(ToFloats(x2), ToFloats(out));
  EXPECT_EQ(ToFloats(residual2), ToFloats(residual));
}

// A BF16/F16 output is the F32 result rounded to nearest even, with and without the residual.
TEST(RmsNormTest, LowPrecisionOutputIsTheRoundedF32Output) {
  const int64_t n = 4, hidden = 72;
  HostTensor x = RandomTensor(DType::kF32, {n, hidden}, 11, -2.0f, 2.0f);
  HostTensor weight = RandomTensor(DType::kBF16, {hidden}, 12);
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (bool with_residual : {false, true}) {
      HostTensor residual = RandomTensor(DType::kF32, {n, hidden}, 13);
      HostTensor residual_f32 = CopyF32(residual);
      const TensorView r = with_residual ? residual.view() : TensorView{};
      const TensorView r_f32 = with_residual ? residual_f32.view() : TensorView{};
      HostTensor f32 = PoisonedF32({n, hidden});
      HostTensor low = Poisoned(dtype, {n, hidden});
      ASSERT_TRUE(RmsNormRef({CView(x), CView(weight), r_f32, f32.view()}).ok());
      ASSERT_TRUE(RmsNormRef({CView(x), CView(weight), r, low.view()}).ok());
      HostTensor expected(dtype, {n, hidden});
      ASSERT_TRUE(ConvertFloats(f32.view().data, DType::kF32, expected.view().data, dtype,
                                static_cast<size_t>(n * hidden)).ok());
      ASSERT_TRUE(AllFinite(low));
      EXPECT_EQ(ToFloats(low), ToFloats(expected)) << DTypeName(dtype) << " " << with_residual;
      EXPECT_EQ(ToFloats(residual), ToFloats(residual_f32));
    }
  }
  HostTensor out(DType::kF64, {n, hidden});
  EXPECT_EQ(RmsNormRef({CView(x), CView(weight), {}, out.view()}).code(),
            StatusCode::kInvalidArgument);
}

TEST(RmsNormTest, RejectsBadArguments) {
  HostTensor x = RandomTensor(DType::kF32, {2, 8}, 1);
  HostTensor weight = RandomTensor(DType::kF32, {7}, 2);
  HostTensor good_weight = RandomTensor(DType::kF32, {8}, 2);
  HostTensor residual = RandomTensor(DType::kF32, {3, 8}, 3);
  HostTensor out = PoisonedF32({2, 8});
  EXPECT_EQ(RmsNormRef({CView(x), CView(weight), {}, out.view()}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(RmsNormRef({CView(x), CView(good_weight), residual.view(), out.view()}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(RmsNormRef({CView(x), CView(good_weight), {}, out.view(), -1.0f}).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace millipede
