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
