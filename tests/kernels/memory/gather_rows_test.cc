#include "kernels/memory/gather_rows.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/kernels/kernel_test_util.h"

namespace millipede {
namespace {

using testing::CView;
using testing::PoisonedF32;
using testing::RandomTensor;
using testing::TensorOf;
using testing::ToFloats;

HostTensor Indices(DType dtype, const std::vector<int64_t>& values) {
  HostTensor t(dtype, {static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kI32)
      t.data<int32_t>()[i] = static_cast<int32_t>(values[i]);
    else
      t.data<int64_t>()[i] = values[i];
  }
  return t;
}

HostTensor Bytes(const Shape& shape, uint64_t seed) {
  HostTensor t(DType::kU8, shape);
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < t.NumElements(); ++i) t.data<uint8_t>()[i] = static_cast<uint8_t>(rng());
  return t;
}

TEST(GatherRowsTest, PicksRowsByHand) {
  HostTensor src = TensorOf(DType::kF32, {3, 2}, {1, 2, 3, 4, 5, 6});
  for (DType index_dtype : {DType::kI32, DType::kI64}) {
    HostTensor index = Indices(index_dtype, {2, 0, 2, 1});
    HostTensor dst = PoisonedF32({4, 2});
    ASSERT_TRUE(GatherRowsRef({CView(src), CView(index), dst.view()}).ok());
    EXPECT_EQ(ToFloats(dst), (std::vector<float>{5, 6, 1, 2, 5, 6, 3, 4}));
  }
}

// Any dtype: the rows are moved as bytes. U8 rows of 3 bytes and I64 rows of one element.
TEST(GatherRowsTest, MovesRowsOfAnyDtypeAndWidthByteForByte) {
  for (DType dtype : {DType::kU8, DType::kBF16, DType::kF16, DType::kI32, DType::kI64}) {
    const int64_t n = 9, width = dtype == DType::kI64 ? 1 : 3, m = 13;
    const int64_t elem = static_cast<int64_t>(DTypeSize(dtype));
    HostTensor raw = Bytes({n * width * elem}, 5);
    HostTensor src(dtype, {n, width});
    std::memcpy(src.view().data, raw.view().data, raw.NumBytes());
    std::vector<int64_t> rows;
    for (int64_t i = 0; i < m; ++i) rows.push_back((i * 5 + 3) % n);
    HostTensor index = Indices(DType::kI64, rows);
    HostTensor dst(dtype, {m, width});
    std::memset(dst.view().data, 0xCD, dst.NumBytes());
    ASSERT_TRUE(GatherRowsRef({CView(src), CView(index), dst.view()}).ok()) << DTypeName(dtype);
    const size_t row_bytes = static_cast<size_t>(width * elem);
    for (int64_t i = 0; i < m; ++i)
      EXPECT_EQ(
          std::memcmp(static_cast<const char*>(dst.view().data) + i * row_bytes,
                      static_cast<const char*>(src.view().data) + rows[i] * row_bytes, row_bytes),
          0)
          << DTypeName(dtype) << " row " << i;
  }
}

// The per-KV-head use: K [n, kv_heads, head_dim] seen as [n * kv_heads, head_dim], row
// j * kv_heads + g, gives head g's keys j.
TEST(GatherRowsTest, PerKvHeadGatherThroughAFlatView) {
  const int64_t n = 11, kv_heads = 3, head_dim = 5, g = 2;
  HostTensor k = RandomTensor(DType::kBF16, {n, kv_heads, head_dim}, 7);
  const std::vector<int64_t> keys{10, 0, 4, 4, 7};
  std::vector<int64_t> rows;
  for (int64_t j : keys) rows.push_back(j * kv_heads + g);
  HostTensor index = Indices(DType::kI32, rows);
  HostTensor dst(DType::kBF16, {static_cast<int64_t>(keys.size()), head_dim});
  auto flat = Reshape(CView(k), Shape{n * kv_heads, head_dim});
  ASSERT_TRUE(flat.ok());
  ASSERT_TRUE(GatherRowsRef({*flat, CView(index), dst.view()}).ok());
  const std::vector<float> kf = ToFloats(k), out = ToFloats(dst);
  for (size_t i = 0; i < keys.size(); ++i)
    for (int64_t c = 0; c < head_dim; ++c)
      EXPECT_EQ(out[i * head_dim + c], kf[(keys[i] * kv_heads + g) * head_dim + c]);
}

TEST(GatherRowsTest, OutOfRangeIndexIsAnErrorAndWritesNothing) {
  HostTensor src = RandomTensor(DType::kF32, {4, 3}, 9);
  for (int64_t bad : {int64_t{4}, int64_t{-1}, int64_t{1} << 40}) {
    HostTensor index = Indices(DType::kI64, {1, 3, bad});
    HostTensor dst = PoisonedF32({3, 3});
    Status status = GatherRowsRef({CView(src), CView(index), dst.view()});
    EXPECT_EQ(status.code(), StatusCode::kOutOfRange);
    EXPECT_NE(status.message().find("index[2] = " + std::to_string(bad)), std::string::npos)
        << status.ToString();
    for (float v : ToFloats(dst)) EXPECT_TRUE(std::isnan(v));
  }
}

TEST(GatherRowsTest, EmptyIndexAndEmptyRows) {
  HostTensor src = RandomTensor(DType::kF32, {4, 3}, 9);
  HostTensor none = Indices(DType::kI32, {});
  HostTensor dst(DType::kF32, {0, 3});
  EXPECT_TRUE(GatherRowsRef({CView(src), CView(none), dst.view()}).ok());
  // Zero-width rows: any in-range index, nothing moved.
  HostTensor thin(DType::kF32, {4, 0});
  HostTensor index = Indices(DType::kI32, {3, 0});
  HostTensor thin_dst(DType::kF32, {2, 0});
  EXPECT_TRUE(GatherRowsRef({CView(thin), CView(index), thin_dst.view()}).ok());
}

TEST(GatherRowsTest, RejectsBadShapesAndDtypes) {
  HostTensor src(DType::kF32, {4, 3});
  HostTensor index = Indices(DType::kI32, {0, 1});
  HostTensor dst(DType::kF32, {2, 3});
  EXPECT_TRUE(GatherRowsRef({CView(src), CView(index), dst.view()}).ok());
  HostTensor dst_rows(DType::kF32, {3, 3});
  EXPECT_FALSE(GatherRowsRef({CView(src), CView(index), dst_rows.view()}).ok());
  HostTensor dst_width(DType::kF32, {2, 4});
  EXPECT_FALSE(GatherRowsRef({CView(src), CView(index), dst_width.view()}).ok());
  HostTensor dst_dtype(DType::kBF16, {2, 3});
  EXPECT_FALSE(GatherRowsRef({CView(src), CView(index), dst_dtype.view()}).ok());
  HostTensor float_index(DType::kF32, {2});
  EXPECT_FALSE(GatherRowsRef({CView(src), CView(float_index), dst.view()}).ok());
  HostTensor index_2d(DType::kI32, {2, 1});
  EXPECT_FALSE(GatherRowsRef({CView(src), CView(index_2d), dst.view()}).ok());
  // The trailing shape may differ when the row size matches.
  HostTensor dst_3d(DType::kF32, {2, 1, 3});
  EXPECT_TRUE(GatherRowsRef({CView(src), CView(index), dst_3d.view()}).ok());
}

}  // namespace
}  // namespace millipede
