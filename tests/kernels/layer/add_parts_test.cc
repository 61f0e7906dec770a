#include "kernels/layer/add_parts.h"

#include <gtest/gtest.h>

#include "tests/kernels/kernel_test_util.h"

namespace millipede {
namespace {

using testing::CopyF32;
using testing::CView;
using testing::RandomTensor;
using testing::TensorOf;
using testing::ToFloats;

TEST(AddPartsTest, HandValues) {
  // Three parts of [1, 2] with one padding float between them (stride 3).
  HostTensor parts = TensorOf(DType::kF32, {3, 1, 3}, {1, 2, 99, 10, 20, 99, 100, 200, 99});
  const ConstTensorView view{parts.view().data, DType::kF32, Shape{3, 1, 2}};
  HostTensor out = TensorOf(DType::kF32, {1, 2}, {0.5f, -1});
  ASSERT_TRUE(AddPartsRef({view, 3, out.view()}).ok());
  EXPECT_EQ(ToFloats(out), (std::vector<float>{111.5f, 221}));
  // No parts: out unchanged.
  ASSERT_TRUE(AddPartsRef({{parts.view().data, DType::kF32, Shape{0, 1, 2}}, 0, out.view()}).ok());
  EXPECT_EQ(ToFloats(out), (std::vector<float>{111.5f, 221}));
}

// The parts are summed first, in order, then added: (out + (p0 + p1)), not ((out + p0) + p1).
TEST(AddPartsTest, SumsThePartsBeforeAddingThem) {
  HostTensor parts = TensorOf(DType::kF32, {2, 1, 1}, {1.0f, -1.0f});
  HostTensor out = TensorOf(DType::kF32, {1, 1}, {1e8f});
  ASSERT_TRUE(AddPartsRef({CView(parts), 0, out.view()}).ok());
  EXPECT_EQ(ToFloats(out)[0], 1e8f);  // ((1e8 + 1) - 1) would round to 1e8 - 8 or so.
  const int64_t m = 3, n = 5;
  HostTensor random = RandomTensor(DType::kF32, {4, m, n}, 7, -3.0f, 3.0f);
  HostTensor base = RandomTensor(DType::kF32, {m, n}, 8);
  HostTensor got = CopyF32(base);
  ASSERT_TRUE(AddPartsRef({CView(random), 0, got.view()}).ok());
  const std::vector<float> p = ToFloats(random), b = ToFloats(base), g = ToFloats(got);
  for (int64_t e = 0; e < m * n; ++e) {
    const float sum = ((p[e] + p[m * n + e]) + p[2 * m * n + e]) + p[3 * m * n + e];
    EXPECT_EQ(g[e], b[e] + sum) << e;
  }
}

TEST(AddPartsTest, RejectsBadArguments) {
  HostTensor parts = RandomTensor(DType::kF32, {2, 3, 4}, 1);
  HostTensor out(DType::kF32, {3, 4}), out_bad(DType::kF32, {4, 3});
  HostTensor parts_bf16 = RandomTensor(DType::kBF16, {2, 3, 4}, 1);
  EXPECT_EQ(AddPartsRef({CView(parts), 0, out_bad.view()}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(AddPartsRef({CView(parts_bf16), 0, out.view()}).code(),
            StatusCode::kInvalidArgument);
  const Status status = AddPartsRef({CView(parts), 11, out.view()});
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("part stride"), std::string::npos) << status.ToString();
  HostTensor flat = RandomTensor(DType::kF32, {3, 4}, 2);
  EXPECT_EQ(AddPartsRef({CView(flat), 0, out.view()}).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace millipede
