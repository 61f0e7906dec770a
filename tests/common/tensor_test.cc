#include "common/tensor.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace millipede {
namespace {

TEST(TensorTest, ShapeBasics) {
  Shape s{2, 3, 4};
  EXPECT_EQ(s.rank, 3);
  EXPECT_EQ(s.NumElements(), 24);
  EXPECT_EQ(s.ToString(), "[2, 3, 4]");
  EXPECT_EQ(Shape{}.NumElements(), 1);  // a scalar
  EXPECT_FALSE(Shape::FromVector({1, 2, 3, 4, 5, 6, 7}).ok());
  EXPECT_TRUE(Shape::FromVector({1, 2}).ok());
}

TEST(TensorTest, HostTensorIsAlignedAndSized) {
  HostTensor t(DType::kBF16, Shape{5, 7});
  EXPECT_EQ(t.NumBytes(), 70u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data<void>()) % 64, 0u);
  TensorView v = t.view();
  EXPECT_EQ(v.NumElements(), 35);
  EXPECT_TRUE(CheckTensor(v, "t", DType::kBF16, Shape{5, 7}).ok());
  Status bad = CheckTensor(v, "weights", DType::kF32, Shape{5, 7});
  EXPECT_NE(bad.message().find("weights"), std::string::npos);
  EXPECT_NE(CheckTensor(v, "t", DType::kBF16, Shape{7, 5}).message().find("[5, 7]"),
            std::string::npos);
}

}  // namespace
}  // namespace millipede

namespace millipede {
namespace {

TEST(TensorTest, SliceRowsAndReshape) {
  HostTensor t(DType::kF32, Shape{4, 3});
  for (int i = 0; i < 12; ++i) t.data<float>()[i] = static_cast<float>(i);
  TensorView rows = SliceRows(t.view(), 1, 2);
  EXPECT_EQ(rows.shape, (Shape{2, 3}));
  EXPECT_EQ(rows.as<float>()[0], 3.0f);
  ConstTensorView c = SliceRows(AsConst(t.view()), 3, 1);
  EXPECT_EQ(static_cast<const float*>(c.data)[2], 11.0f);
  auto r = Reshape(t.view(), Shape{2, 2, 3});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->shape.rank, 3);
  EXPECT_FALSE(Reshape(t.view(), Shape{5, 3}).ok());
}

TEST(TensorTest, SubViewOfMatricesBackToBack) {
  HostTensor t(DType::kBF16, Shape{4, 3});
  // Elements 3..8 as a [2, 3] matrix, then the last 3 as [1, 3].
  auto middle = SubView(AsConst(t.view()), 3, Shape{2, 3});
  ASSERT_TRUE(middle.ok());
  EXPECT_EQ(middle->shape, (Shape{2, 3}));
  EXPECT_EQ(middle->dtype, DType::kBF16);
  EXPECT_EQ(static_cast<const char*>(middle->data) - static_cast<const char*>(t.view().data), 6);
  auto last = SubView(t.view(), 9, Shape{1, 3});
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(last->as<char>() - t.data<char>(), 18);
  EXPECT_FALSE(SubView(t.view(), 10, Shape{1, 3}).ok());
  EXPECT_FALSE(SubView(t.view(), -1, Shape{1}).ok());
  EXPECT_TRUE(SubView(t.view(), 12, Shape{0}).ok());
}

}  // namespace
}  // namespace millipede
