#include "kernels/layer/gemm.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/kernels/kernel_test_util.h"

namespace millipede {
namespace {

using testing::AllClose;
using testing::AllFinite;
using testing::CopyF32;
using testing::CView;
using testing::PoisonedF32;
using testing::RandomTensor;
using testing::TensorOf;
using testing::ToFloats;

TEST(GemmTest, HandValues) {
  // a = [[1, 2, 3], [4, 5, 6]], b = [[1, 0, -1], [2, 1, 0.5]], bias = [10, -1]:
  // row 0: (1 - 3) + 10 = 8, (2 + 2 + 1.5) - 1 = 4.5; row 1: (4 - 6) + 10 = 8, (8 + 5 + 3) - 1
  // = 15.
  HostTensor a = TensorOf(DType::kF32, {2, 3}, {1, 2, 3, 4, 5, 6});
  HostTensor b = TensorOf(DType::kBF16, {2, 3}, {1, 0, -1, 2, 1, 0.5f});
  HostTensor bias = TensorOf(DType::kF16, {2}, {10, -1});
  HostTensor out = PoisonedF32({2, 2});
  ASSERT_TRUE(GemmRef({CView(a), CView(b), CView(bias), out.view()}).ok());
  EXPECT_EQ(ToFloats(out), (std::vector<float>{8, 4.5f, 8, 15}));

  // accumulate: out += a @ b^T + bias.
  ASSERT_TRUE(GemmRef({CView(a), CView(b), CView(bias), out.view(), true}).ok());
  EXPECT_EQ(ToFloats(out), (std::vector<float>{16, 9, 16, 30}));
}

// Every entry against a plain triple loop in double. Products of floats are exact in double, so
// both sides differ only by the order of ~k double additions (relative error ~k * 2^-53 of
// sum |a b|) and the final rounding to fp32: half an ulp. The bound below allows one ulp relative
// to sum |a_p b_p|, which also covers cancellation.
TEST(GemmTest, MatchesTripleLoopForEveryWeightDtypeAndBlockEdge) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t m : {1, 15, 16, 17, 40}) {
      const int64_t k = 67, n = 23;
      HostTensor a = RandomTensor(DType::kF32, {m, k}, 100 + m);
      HostTensor b = RandomTensor(dtype, {n, k}, 200 + m);
      HostTensor bias = RandomTensor(dtype, {n}, 300 + m);
      HostTensor out = PoisonedF32({m, n});
      ASSERT_TRUE(GemmRef({CView(a), CView(b), CView(bias), out.view()}).ok());
      ASSERT_TRUE(AllFinite(out));
      const std::vector<float> af = ToFloats(a), bf = ToFloats(b), biasf = ToFloats(bias);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double expected = biasf[j], magnitude = std::abs(biasf[j]);
          for (int64_t p = 0; p < k; ++p) {
            expected += double(af[i * k + p]) * bf[j * k + p];
            magnitude += std::abs(double(af[i * k + p]) * bf[j * k + p]);
          }
          ASSERT_NEAR(out.data<float>()[i * n + j], expected, magnitude * 0x1p-23)
              << DTypeName(dtype) << " m=" << m << " at (" << i << ", " << j << ")";
        }
      }
    }
  }
}

TEST(GemmTest, NoBiasAndAccumulateIntoExisting) {
  const int64_t m = 5, k = 33, n = 9;
  HostTensor a = RandomTensor(DType::kF32, {m, k}, 1);
  HostTensor b = RandomTensor(DType::kF32, {n, k}, 2);
  HostTensor product = PoisonedF32({m, n});
  ASSERT_TRUE(GemmRef({CView(a), CView(b), {}, product.view()}).ok());
  ASSERT_TRUE(AllFinite(product));
  HostTensor base = RandomTensor(DType::kF32, {m, n}, 3, -4.0f, 4.0f);
  HostTensor acc = CopyF32(base);
  ASSERT_TRUE(GemmRef({CView(a), CView(b), {}, acc.view(), true}).ok());
  std::vector<float> expected(m * n);
  for (int64_t i = 0; i < m * n; ++i)
    expected[i] = base.data<float>()[i] + product.data<float>()[i];
  EXPECT_TRUE(AllClose(ToFloats(acc), expected, 1e-6, 1e-6));
}

// Activations given already rounded to the weight's dtype (what a GPU GEMM's producer writes) are
// widened exactly: the same result, bit for bit, as F32 activations holding those rounded values.
TEST(GemmTest, RoundedActivationsEqualTheirF32Values) {
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (int64_t m : {1, 16, 19}) {
      const int64_t k = 70, n = 11;
      HostTensor a = RandomTensor(dtype, {m, k}, 400 + m, -3.0f, 3.0f);
      HostTensor a_f32 = TensorOf(DType::kF32, {m, k}, ToFloats(a));
      HostTensor b = RandomTensor(dtype, {n, k}, 500 + m);
      HostTensor bias = RandomTensor(DType::kF32, {n}, 600 + m);
      HostTensor out = PoisonedF32({m, n}), expected = PoisonedF32({m, n});
      ASSERT_TRUE(GemmRef({CView(a), CView(b), CView(bias), out.view()}).ok());
      ASSERT_TRUE(GemmRef({CView(a_f32), CView(b), CView(bias), expected.view()}).ok());
      ASSERT_TRUE(AllFinite(out));
      EXPECT_EQ(ToFloats(out), ToFloats(expected)) << DTypeName(dtype) << " m=" << m;
    }
  }
  // Only F32, or the weight's own BF16/F16.
  HostTensor a = RandomTensor(DType::kBF16, {2, 3}, 1);
  HostTensor out = PoisonedF32({2, 4});
  for (DType weight : {DType::kF16, DType::kF32}) {
    HostTensor b = RandomTensor(weight, {4, 3}, 2);
    Status status = GemmRef({CView(a), CView(b), {}, out.view()});
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("gemm a"), std::string::npos) << status.ToString();
  }
}

// A row stride takes columns [c0, c0 + k) of a wider weight: the same result, bit for bit, as
// those columns copied out.
TEST(GemmTest, RowStrideReadsAColumnBlockOfAWiderWeight) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t m : {1, 17}) {
      const int64_t n = 13, ldb = 50, c0 = 9, k = 29;
      HostTensor a = RandomTensor(DType::kF32, {m, k}, 700 + m);
      HostTensor whole = RandomTensor(dtype, {n, ldb}, 800 + m);
      const std::vector<float> wf = ToFloats(whole);
      std::vector<float> block;
      for (int64_t j = 0; j < n; ++j)
        block.insert(block.end(), wf.begin() + j * ldb + c0, wf.begin() + j * ldb + c0 + k);
      HostTensor copied = TensorOf(dtype, {n, k}, block);
      HostTensor bias = RandomTensor(DType::kF32, {n}, 900 + m);
      HostTensor init = RandomTensor(DType::kF32, {m, n}, 950 + m);
      HostTensor out = CopyF32(init), expected = CopyF32(init);
      const ConstTensorView columns{static_cast<const char*>(whole.view().data) +
                                        c0 * DTypeSize(dtype),
                                    dtype, Shape{n, k}};
      ASSERT_TRUE(GemmRef({CView(a), columns, CView(bias), out.view(), true, ldb}).ok());
      ASSERT_TRUE(GemmRef({CView(a), CView(copied), CView(bias), expected.view(), true}).ok());
      EXPECT_EQ(ToFloats(out), ToFloats(expected)) << DTypeName(dtype) << " m=" << m;
    }
  }
  // A stride shorter than the rows is refused.
  HostTensor a = RandomTensor(DType::kF32, {2, 8}, 1);
  HostTensor b = RandomTensor(DType::kF32, {3, 8}, 2);
  HostTensor out = PoisonedF32({2, 3});
  const Status status = GemmRef({CView(a), CView(b), {}, out.view(), false, 7});
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("row stride"), std::string::npos) << status.ToString();
}

TEST(GemmTest, RejectsMismatchedShapes) {
  HostTensor a = RandomTensor(DType::kF32, {2, 3}, 1);
  HostTensor b = RandomTensor(DType::kF32, {4, 5}, 2);
  HostTensor b_ok = RandomTensor(DType::kF32, {4, 3}, 2);
  HostTensor bias = RandomTensor(DType::kF32, {5}, 3);
  HostTensor out = PoisonedF32({2, 4});
  HostTensor out_bad = PoisonedF32({4, 2});
  Status status = GemmRef({CView(a), CView(b), {}, out.view()});
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("gemm b"), std::string::npos) << status.ToString();
  EXPECT_EQ(GemmRef({CView(a), CView(b_ok), CView(bias), out.view()}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(GemmRef({CView(a), CView(b_ok), {}, out_bad.view()}).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace millipede
