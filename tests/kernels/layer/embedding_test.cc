#include "kernels/layer/embedding.h"

#include <gtest/gtest.h>

#include "tests/kernels/kernel_test_util.h"

namespace millipede {
namespace {

using testing::CView;
using testing::PoisonedF32;
using testing::RandomTensor;
using testing::TensorOf;
using testing::ToFloats;

TEST(EmbeddingTest, GathersRowsByHand) {
  HostTensor table = TensorOf(DType::kF32, {3, 2}, {1.5f, -2.0f, 3.25f, 4.0f, -5.5f, 6.0f});
  HostTensor ids = TensorOf(DType::kI32, {4}, {0, 0, 0, 0});
  ids.data<int32_t>()[0] = 2;
  ids.data<int32_t>()[1] = 0;
  ids.data<int32_t>()[2] = 2;
  ids.data<int32_t>()[3] = 1;
  HostTensor out = PoisonedF32({4, 2});
  ASSERT_TRUE(EmbeddingRef({CView(ids), CView(table), out.view()}).ok());
  EXPECT_EQ(ToFloats(out),
            (std::vector<float>{-5.5f, 6.0f, 1.5f, -2.0f, -5.5f, 6.0f, 3.25f, 4.0f}));
}

TEST(EmbeddingTest, HalfPrecisionTablesMatchTheirFloatValues) {
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    const int64_t vocab = 50, hidden = 24, n = 17;
    HostTensor table = RandomTensor(dtype, {vocab, hidden}, 1);
    HostTensor ids(DType::kI32, {n});
    for (int64_t i = 0; i < n; ++i)
      ids.data<int32_t>()[i] = static_cast<int32_t>((i * 31 + 7) % vocab);
    HostTensor out = PoisonedF32({n, hidden});
    ASSERT_TRUE(EmbeddingRef({CView(ids), CView(table), out.view()}).ok());
    const std::vector<float> table_f = ToFloats(table);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < hidden; ++j)
        ASSERT_EQ(out.data<float>()[i * hidden + j], table_f[ids.data<int32_t>()[i] * hidden + j]);
  }
}

TEST(EmbeddingTest, OutOfRangeIdNamesIdAndPosition) {
  HostTensor table = RandomTensor(DType::kBF16, {10, 4}, 2);
  for (int32_t bad : {10, -1, 1 << 30}) {
    HostTensor ids = TensorOf(DType::kI32, {3}, {0, 0, 0});
    ids.data<int32_t>()[0] = 3;
    ids.data<int32_t>()[1] = bad;
    HostTensor out = PoisonedF32({3, 4});
    Status status = EmbeddingRef({CView(ids), CView(table), out.view()});
    EXPECT_EQ(status.code(), StatusCode::kOutOfRange);
    EXPECT_NE(status.message().find("token id " + std::to_string(bad)), std::string::npos)
        << status.ToString();
    EXPECT_NE(status.message().find("position 1"), std::string::npos) << status.ToString();
  }
}

TEST(EmbeddingTest, RejectsBadShapesAndDtypes) {
  HostTensor table = RandomTensor(DType::kF32, {10, 4}, 3);
  HostTensor ids = TensorOf(DType::kI32, {2}, {0, 0});
  HostTensor ids64(DType::kI64, {2});
  HostTensor out = PoisonedF32({2, 4});
  HostTensor wrong_out = PoisonedF32({2, 5});
  HostTensor int_table(DType::kI32, {10, 4});
  EXPECT_EQ(EmbeddingRef({CView(ids64), CView(table), out.view()}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(EmbeddingRef({CView(ids), CView(table), wrong_out.view()}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(EmbeddingRef({CView(ids), CView(int_table), out.view()}).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace millipede
