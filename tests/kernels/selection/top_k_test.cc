#include "kernels/selection/top_k.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "tests/kernels/kernel_test_util.h"

namespace millipede {
namespace {

using testing::CView;
using testing::kInf;
using testing::kNaN;
using testing::PoisonedF32;
using testing::TensorOf;

struct TopKResult {
  std::vector<int32_t> index;
  std::vector<float> value;
};

StatusOr<TopKResult> RunTopK(const HostTensor& scores, int64_t k,
                             TopKOrder order = TopKOrder::kValue) {
  const int64_t rows = scores.shape()[0];
  HostTensor index(DType::kI32, {rows, k});
  std::fill_n(index.data<int32_t>(), index.NumElements(), -7);
  HostTensor value = PoisonedF32({rows, k});
  MP_RETURN_IF_ERROR(TopKRef({CView(scores), k, index.view(), value.view(), order}));
  return TopKResult{{index.data<int32_t>(), index.data<int32_t>() + index.NumElements()},
                    {value.data<float>(), value.data<float>() + value.NumElements()}};
}

// An independent oracle: a stable sort of every non-NaN column by value (descending) keeps equal
// values in column order; the first k, then the (-1, -inf) tail.
TopKResult SortOracle(const std::vector<float>& scores, int64_t rows, int64_t cols, int64_t k) {
  TopKResult out;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int32_t> columns;
    for (int64_t c = 0; c < cols; ++c)
      if (!std::isnan(scores[r * cols + c])) columns.push_back(static_cast<int32_t>(c));
    std::stable_sort(columns.begin(), columns.end(), [&](int32_t a, int32_t b) {
      return scores[r * cols + a] > scores[r * cols + b];
    });
    for (int64_t i = 0; i < k; ++i) {
      const bool in = i < static_cast<int64_t>(columns.size());
      out.index.push_back(in ? columns[i] : -1);
      out.value.push_back(in ? scores[r * cols + columns[i]] : -kInf);
    }
  }
  return out;
}

TEST(TopKTest, PicksBestFirstWithTiesToTheLowerColumn) {
  HostTensor scores = TensorOf(DType::kF32, {2, 6},
                               {3, 1, 3, kNaN, -kInf, 2,  //
                                0, 5, -1, 5, 5, kInf});
  auto r = RunTopK(scores, 4);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->index, (std::vector<int32_t>{0, 2, 5, 1, 5, 1, 3, 4}));
  EXPECT_EQ(r->value, (std::vector<float>{3, 3, 2, 1, kInf, 5, 5, 5}));
}

TEST(TopKTest, NaNIsNeverSelectedAndShortRowsEndInMinusOne) {
  // Row 0 has five selectable entries (the -inf one included), row 1 none.
  HostTensor scores = TensorOf(DType::kF32, {2, 6},
                               {3, 1, 3, kNaN, -kInf, 2,  //
                                kNaN, kNaN, kNaN, kNaN, kNaN, kNaN});
  auto r = RunTopK(scores, 7);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->index, (std::vector<int32_t>{0, 2, 5, 1, 4, -1, -1, -1, -1, -1, -1, -1, -1, -1}));
  for (size_t i = 4; i < r->value.size(); ++i) EXPECT_EQ(r->value[i], -kInf) << i;
}

TEST(TopKTest, SignedZerosTieAndKeepTheirSign) {
  HostTensor scores = TensorOf(DType::kF32, {1, 4}, {-0.0f, -1.0f, 0.0f, -0.0f});
  auto r = RunTopK(scores, 3);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->index, (std::vector<int32_t>{0, 2, 3}));
  EXPECT_TRUE(std::signbit(r->value[0]));
  EXPECT_FALSE(std::signbit(r->value[1]));
  EXPECT_TRUE(std::signbit(r->value[2]));
}

TEST(TopKTest, MatchesAStableSortOnRandomRowsWithTies) {
  std::mt19937_64 rng(41);
  struct Size {
    int64_t rows, cols, k;
  };
  for (const Size& s : {Size{3, 1, 1}, Size{5, 37, 8}, Size{2, 1000, 999}, Size{4, 513, 513},
                        Size{3, 300, 1000}, Size{1, 4096, 100}}) {
    for (int kind = 0; kind < 3; ++kind) {
      std::vector<float> values(static_cast<size_t>(s.rows * s.cols));
      std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
      for (float& v : values) {
        v = dist(rng);
        if (kind >= 1) v = std::round(v * 2.0f) / 2.0f;  // few distinct values: many ties
        if (kind == 2 && rng() % 7 == 0) v = (rng() % 2) ? kNaN : -kInf;
      }
      HostTensor scores = TensorOf(DType::kF32, {s.rows, s.cols}, values);
      auto r = RunTopK(scores, s.k);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      const TopKResult want = SortOracle(values, s.rows, s.cols, s.k);
      EXPECT_EQ(r->index, want.index)
          << s.rows << "x" << s.cols << " k " << s.k << " kind " << kind;
      EXPECT_EQ(r->value, want.value);
    }
  }
}

// Column order: the same set as value order, each row's selected columns increasing, then the
// same (-1, -inf) tail.
TEST(TopKTest, ColumnOrderKeepsTheSetInColumnOrder) {
  HostTensor scores = TensorOf(DType::kF32, {2, 6},
                               {3, 1, 3, kNaN, -kInf, 2,  //
                                0, 5, -1, 5, 5, kInf});
  auto r = RunTopK(scores, 4, TopKOrder::kColumn);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->index, (std::vector<int32_t>{0, 1, 2, 5, 1, 3, 4, 5}));
  EXPECT_EQ(r->value, (std::vector<float>{3, 1, 3, 2, 5, 5, 5, kInf}));
  auto short_rows = RunTopK(scores, 7, TopKOrder::kColumn);
  ASSERT_TRUE(short_rows.ok());
  EXPECT_EQ(std::vector<int32_t>(short_rows->index.begin(), short_rows->index.begin() + 7),
            (std::vector<int32_t>{0, 1, 2, 4, 5, -1, -1}));

  std::mt19937_64 rng(43);
  std::vector<float> values(3 * 500);
  for (float& v : values) v = std::round(std::uniform_real_distribution<float>(-3, 3)(rng));
  for (size_t i = 0; i < values.size(); i += 11) values[i] = kNaN;
  HostTensor random = TensorOf(DType::kF32, {3, 500}, values);
  for (int64_t k : {1, 37, 460, 600}) {
    auto by_value = RunTopK(random, k);
    auto by_column = RunTopK(random, k, TopKOrder::kColumn);
    ASSERT_TRUE(by_value.ok() && by_column.ok());
    for (int64_t r = 0; r < 3; ++r) {
      std::vector<int32_t> want(by_value->index.begin() + r * k,
                                by_value->index.begin() + (r + 1) * k);
      std::sort(want.begin(), want.end(), [](int32_t a, int32_t b) {
        return a >= 0 && b >= 0 ? a < b : a >= 0;  // -1 tail last
      });
      const std::vector<int32_t> got(by_column->index.begin() + r * k,
                                     by_column->index.begin() + (r + 1) * k);
      EXPECT_EQ(got, want) << "k " << k << " row " << r;
      for (int64_t i = 0; i < k; ++i) {
        const int32_t c = got[static_cast<size_t>(i)];
        const float v = by_column->value[static_cast<size_t>(r * k + i)];
        if (c < 0) {
          EXPECT_EQ(v, -kInf);
        } else {
          EXPECT_EQ(v, values[static_cast<size_t>(r * 500 + c)]);
        }
      }
    }
  }
}

TEST(TopKTest, EmptyCases) {
  // k == 0 and rows == 0 write nothing; cols == 0 gives the tail only.
  EXPECT_TRUE(RunTopK(HostTensor(DType::kF32, {3, 5}), 0).ok());
  EXPECT_TRUE(RunTopK(HostTensor(DType::kF32, {0, 5}), 4).ok());
  auto r = RunTopK(HostTensor(DType::kF32, {2, 0}), 2);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->index, (std::vector<int32_t>{-1, -1, -1, -1}));
  EXPECT_EQ(r->value, (std::vector<float>{-kInf, -kInf, -kInf, -kInf}));
}

TEST(TopKTest, RejectsBadArguments) {
  HostTensor scores(DType::kF32, {2, 5});
  HostTensor index(DType::kI32, {2, 3});
  HostTensor value(DType::kF32, {2, 3});
  EXPECT_TRUE(TopKRef({CView(scores), 3, index.view(), value.view()}).ok());
  EXPECT_FALSE(TopKRef({CView(scores), -1, index.view(), value.view()}).ok());
  EXPECT_FALSE(TopKRef({CView(scores), 2, index.view(), value.view()}).ok());  // k vs shape
  HostTensor index64(DType::kI64, {2, 3});
  EXPECT_FALSE(TopKRef({CView(scores), 3, index64.view(), value.view()}).ok());
  HostTensor bf16(DType::kBF16, {2, 5});
  EXPECT_FALSE(TopKRef({CView(bf16), 3, index.view(), value.view()}).ok());
  HostTensor flat(DType::kF32, {10});
  EXPECT_FALSE(TopKRef({CView(flat), 3, index.view(), value.view()}).ok());
  ConstTensorView huge{scores.view().data, DType::kF32, Shape{1, int64_t{1} << 31}};
  HostTensor index1(DType::kI32, {1, 1});
  HostTensor value1(DType::kF32, {1, 1});
  Status status = TopKRef({huge, 1, index1.view(), value1.view()});
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("I32"), std::string::npos) << status.ToString();
}

}  // namespace
}  // namespace millipede
