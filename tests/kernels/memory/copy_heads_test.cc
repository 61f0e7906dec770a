// CopyHeadsRef: heads moved by hand, packing then unpacking gives the input back, other heads of
// dst untouched, any dtype byte for byte, and every bad shape or head list refused.
#include "kernels/memory/copy_heads.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "tests/kernels/kernel_test_util.h"

namespace millipede {
namespace {

using testing::CView;
using testing::TensorOf;
using testing::ToFloats;

TEST(CopyHeadsTest, MovesHeadsByHand) {
  // src [2 rows, 3 heads, 2]: row t head h holds (10t + h, -(10t + h)).
  std::vector<float> values;
  for (int t = 0; t < 2; ++t)
    for (int h = 0; h < 3; ++h) values.insert(values.end(), {10.0f * t + h, -(10.0f * t + h)});
  HostTensor src = TensorOf(DType::kF32, {2, 3, 2}, values);
  HostTensor dst = TensorOf(DType::kF32, {2, 2, 2}, {7, 7, 7, 7, 7, 7, 7, 7});
  const std::vector<int32_t> from{2}, to{0};
  ASSERT_TRUE(CopyHeadsRef({CView(src), dst.view(), from, to}).ok());
  // Head 1 of dst is left as it was.
  EXPECT_EQ(ToFloats(dst), (std::vector<float>{2, -2, 7, 7, 12, -12, 7, 7}));
}

TEST(CopyHeadsTest, PackThenUnpackGivesTheInputBack) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kU8, DType::kI64}) {
    const int64_t n = 5, heads = 8, width = 3;
    HostTensor src(dtype, {n, heads, width});
    std::mt19937_64 rng(3);
    auto* bytes = static_cast<unsigned char*>(src.view().data);
    for (size_t i = 0; i < src.NumBytes(); ++i) bytes[i] = static_cast<unsigned char>(rng());
    // Two groups, packed apart and unpacked into one tensor.
    const std::vector<int32_t> a{1, 4, 6}, b{0, 2, 3, 5, 7}, a_slots{0, 1, 2},
        b_slots{0, 1, 2, 3, 4};
    HostTensor pa(dtype, {n, 3, width}), pb(dtype, {n, 5, width}), back(dtype, {n, heads, width});
    ASSERT_TRUE(CopyHeadsRef({CView(src), pa.view(), a, a_slots}).ok());
    ASSERT_TRUE(CopyHeadsRef({CView(src), pb.view(), b, b_slots}).ok());
    ASSERT_TRUE(CopyHeadsRef({CView(pa), back.view(), a_slots, a}).ok());
    ASSERT_TRUE(CopyHeadsRef({CView(pb), back.view(), b_slots, b}).ok());
    EXPECT_EQ(std::memcmp(back.view().data, src.view().data, src.NumBytes()), 0)
        << DTypeName(dtype);
    // The pack holds head a[j] of each row at slot j.
    const size_t head = width * DTypeSize(dtype);
    for (int64_t t = 0; t < n; ++t)
      for (size_t j = 0; j < a.size(); ++j)
        EXPECT_EQ(std::memcmp(static_cast<const char*>(pa.view().data) + (t * 3 + j) * head,
                              bytes + (t * heads + a[j]) * head, head),
                  0);
  }
}

TEST(CopyHeadsTest, NothingToDo) {
  HostTensor src(DType::kF32, {0, 4, 2}), dst(DType::kF32, {0, 2, 2});
  const std::vector<int32_t> from{1}, to{0};
  EXPECT_TRUE(CopyHeadsRef({CView(src), dst.view(), from, to}).ok());
  HostTensor src1 = TensorOf(DType::kF32, {1, 1, 1}, {1}), dst1 = TensorOf(DType::kF32, {1, 1, 1}, {5});
  EXPECT_TRUE(CopyHeadsRef({CView(src1), dst1.view(), {}, {}}).ok());
  EXPECT_EQ(ToFloats(dst1), std::vector<float>{5});
}

TEST(CopyHeadsTest, RefusesBadArguments) {
  HostTensor src(DType::kF32, {2, 4, 3}), dst(DType::kF32, {2, 2, 3});
  HostTensor other_width(DType::kF32, {2, 2, 4}), other_rows(DType::kF32, {3, 2, 3});
  HostTensor bf16(DType::kBF16, {2, 2, 3}), flat(DType::kF32, {2, 6});
  const std::vector<int32_t> one{1}, zero{0}, two{0, 1}, dup{0, 0}, out4{4}, out2{2}, neg{-1};
  std::vector<int32_t> many(kCopyHeadsMax + 1, 0);
  auto refused = [](const CopyHeadsArgs& a) { return CopyHeadsRef(a).code() == StatusCode::kInvalidArgument; };
  EXPECT_TRUE(refused({CView(src), other_width.view(), one, zero}));
  EXPECT_TRUE(refused({CView(src), other_rows.view(), one, zero}));
  EXPECT_TRUE(refused({CView(src), bf16.view(), one, zero}));
  EXPECT_TRUE(refused({CView(src), flat.view(), one, zero}));
  EXPECT_TRUE(refused({CView(flat), dst.view(), one, zero}));
  EXPECT_TRUE(refused({CView(src), dst.view(), one, two}));    // lists differ in length
  EXPECT_TRUE(refused({CView(src), dst.view(), two, dup}));    // a destination twice
  EXPECT_TRUE(refused({CView(src), dst.view(), out4, zero}));  // beyond src's heads
  EXPECT_TRUE(refused({CView(src), dst.view(), neg, zero}));
  EXPECT_TRUE(refused({CView(src), dst.view(), one, out2}));   // beyond dst's heads
  EXPECT_TRUE(refused({CView(src), dst.view(), many, many}));
}

}  // namespace
}  // namespace millipede
