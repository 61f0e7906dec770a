// BatchTokenScoresRef: each entry's scores equal TokenScoresRef of its query row over its keys,
// bit for bit, with NaN past its keys (entries of different lengths, an empty one, two sharing a
// query row, rows out of order); one TopK over the matrix then gives each entry its own top-k;
// bad arguments are refused and a bad LSE leaves the output untouched.
#include "kernels/selection/batch_token_scores.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/selection/token_scores.h"
#include "kernels/selection/top_k.h"
#include "tests/kernels/kernel_test_util.h"

namespace millipede {
namespace {

using testing::CView;
using testing::kInf;
using testing::kNaN;
using testing::PoisonedF32;
using testing::RandomTensor;

constexpr int64_t kHeads = 8, kKvHeads = 2, kDim = 16;

// Query row `row` of q [queries, heads, dim] and lse [queries, heads] as TokenScores' q and lse.
ConstTensorView QueryRow(const HostTensor& q, int64_t row) {
  return {q.data<float>() + row * kHeads * kDim, DType::kF32, Shape{kHeads, kDim}};
}
ConstTensorView LseRow(const HostTensor& lse, int64_t row) {
  return {lse.data<float>() + row * kHeads, DType::kF32, Shape{kHeads}};
}

TEST(BatchTokenScoresTest, EachEntryIsItsOwnTokenScoresWithNaNPastItsKeys) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const int64_t queries = 3;
    HostTensor q = RandomTensor(DType::kF32, {queries, kHeads, kDim}, 1, -2.0f, 2.0f);
    HostTensor lse = RandomTensor(DType::kF32, {queries, kHeads}, 2, 2.0f, 5.0f);
    lse.data<float>()[kHeads + 1] = -kInf;  // a head of row 1 that sees nothing
    const std::vector<int64_t> lengths = {13, 0, 31, 7};
    const std::vector<int32_t> rows = {2, 0, 1, 2};  // entries 0 and 3 share row 2
    std::vector<HostTensor> keys;
    std::vector<ConstTensorView> k;
    for (size_t e = 0; e < lengths.size(); ++e)
      keys.push_back(RandomTensor(dtype, {lengths[e], kKvHeads, kDim}, 10 + e, -2.0f, 2.0f));
    for (const HostTensor& t : keys) k.push_back(CView(t));
    const int64_t cols = 33;
    HostTensor score = PoisonedF32({4, kKvHeads, cols});
    for (int64_t i = 0; i < score.NumElements(); ++i) score.data<float>()[i] = 7.0f;
    ASSERT_TRUE(BatchTokenScoresRef({CView(q), CView(lse), k, rows, 0.0f, score.view()}).ok());
    for (size_t e = 0; e < lengths.size(); ++e) {
      const int64_t n = lengths[e];
      HostTensor one = PoisonedF32({kKvHeads, n});
      ASSERT_TRUE(
          TokenScoresRef({QueryRow(q, rows[e]), k[e], LseRow(lse, rows[e]), 0.0f, one.view()})
              .ok());
      for (int64_t g = 0; g < kKvHeads; ++g)
        for (int64_t j = 0; j < cols; ++j) {
          const float got =
              score.data<float>()[(static_cast<int64_t>(e) * kKvHeads + g) * cols + j];
          if (j < n) {
            EXPECT_EQ(std::memcmp(&got, &one.data<float>()[g * n + j], sizeof(float)), 0)
                << "entry " << e << " head " << g << " key " << j;
          } else {
            EXPECT_TRUE(std::isnan(got)) << "entry " << e << " head " << g << " column " << j;
          }
        }
    }
  }
}

// The filter layers' use: one TopK in column order over every entry's rows gives each entry the
// top-k of its own scores, the NaN columns never chosen.
TEST(BatchTokenScoresTest, OneTopKCutsEachEntryAsItsOwn) {
  HostTensor q = RandomTensor(DType::kF32, {2, kHeads, kDim}, 3, -2.0f, 2.0f);
  HostTensor lse = RandomTensor(DType::kF32, {2, kHeads}, 4, 2.0f, 5.0f);
  const std::vector<int64_t> lengths = {40, 9};
  const std::vector<int32_t> rows = {0, 1};
  std::vector<HostTensor> keys;
  std::vector<ConstTensorView> k;
  for (size_t e = 0; e < lengths.size(); ++e)
    keys.push_back(RandomTensor(DType::kBF16, {lengths[e], kKvHeads, kDim}, 20 + e, -2.0f, 2.0f));
  for (const HostTensor& t : keys) k.push_back(CView(t));
  HostTensor score = PoisonedF32({2, kKvHeads, 40});
  ASSERT_TRUE(BatchTokenScoresRef({CView(q), CView(lse), k, rows, 0.0f, score.view()}).ok());
  const int64_t top = 6;
  HostTensor table(DType::kF32, {2 * kKvHeads, 40});
  std::memcpy(table.view().data, score.view().data, score.NumBytes());
  HostTensor index(DType::kI32, {2 * kKvHeads, top}), value = PoisonedF32({2 * kKvHeads, top});
  ASSERT_TRUE(TopKRef({CView(table), top, index.view(), value.view(), TopKOrder::kColumn}).ok());
  for (size_t e = 0; e < lengths.size(); ++e) {
    const int64_t n = lengths[e];
    HostTensor one = PoisonedF32({kKvHeads, n});
    ASSERT_TRUE(
        TokenScoresRef({QueryRow(q, rows[e]), k[e], LseRow(lse, rows[e]), 0.0f, one.view()}).ok());
    HostTensor own_index(DType::kI32, {kKvHeads, top}), own_value = PoisonedF32({kKvHeads, top});
    ASSERT_TRUE(
        TopKRef({CView(one), top, own_index.view(), own_value.view(), TopKOrder::kColumn}).ok());
    for (int64_t i = 0; i < kKvHeads * top; ++i) {
      const int32_t got = index.data<int32_t>()[static_cast<int64_t>(e) * kKvHeads * top + i];
      EXPECT_EQ(got, own_index.data<int32_t>()[i]) << "entry " << e << " slot " << i;
      EXPECT_GE(got, 0);
      EXPECT_LT(got, n);
    }
  }
}

TEST(BatchTokenScoresTest, BadArgumentsAreRefusedAndLeaveTheOutput) {
  HostTensor q = RandomTensor(DType::kF32, {2, kHeads, kDim}, 5);
  HostTensor lse = RandomTensor(DType::kF32, {2, kHeads}, 6, 1.0f, 2.0f);
  HostTensor k0 = RandomTensor(DType::kF32, {5, kKvHeads, kDim}, 7);
  HostTensor k1 = RandomTensor(DType::kF32, {3, kKvHeads, kDim}, 8);
  HostTensor k_bf16 = RandomTensor(DType::kBF16, {3, kKvHeads, kDim}, 9);
  HostTensor score = PoisonedF32({2, kKvHeads, 5});
  std::vector<ConstTensorView> k = {CView(k0), CView(k1)};
  std::vector<int32_t> rows = {0, 1};
  auto code = [&](const BatchTokenScoresArgs& a) { return BatchTokenScoresRef(a).code(); };
  BatchTokenScoresArgs good{CView(q), CView(lse), k, rows, 0.0f, score.view()};
  EXPECT_EQ(code(good), StatusCode::kOk);
  BatchTokenScoresArgs a = good;
  const std::vector<int32_t> one_row = {0};
  a.q_rows = one_row;
  EXPECT_EQ(code(a), StatusCode::kInvalidArgument);
  a = good;
  const std::vector<int32_t> far = {0, 2};
  a.q_rows = far;
  EXPECT_EQ(code(a), StatusCode::kInvalidArgument);
  a = good;
  const std::vector<ConstTensorView> mixed = {CView(k0), CView(k_bf16)};
  a.k = mixed;
  EXPECT_EQ(code(a), StatusCode::kInvalidArgument);
  a = good;
  HostTensor narrow = PoisonedF32({2, kKvHeads, 4});  // entry 0 has 5 keys
  a.score = narrow.view();
  EXPECT_EQ(code(a), StatusCode::kInvalidArgument);
  a = good;
  HostTensor three = PoisonedF32({3, kKvHeads, 5});
  a.score = three.view();
  EXPECT_EQ(code(a), StatusCode::kInvalidArgument);
  a = good;
  a.scale = -1.0f;
  EXPECT_EQ(code(a), StatusCode::kInvalidArgument);
  // A NaN LSE in a row an entry reads: refused before anything is written.
  HostTensor fresh = PoisonedF32({2, kKvHeads, 5});
  for (int64_t i = 0; i < fresh.NumElements(); ++i) fresh.data<float>()[i] = 3.0f;
  lse.data<float>()[kHeads + 2] = kNaN;
  a = good;
  a.score = fresh.view();
  EXPECT_EQ(code(a), StatusCode::kInvalidArgument);
  for (int64_t i = 0; i < fresh.NumElements(); ++i) EXPECT_EQ(fresh.data<float>()[i], 3.0f);
  // Unread rows are not checked: only row 0 read.
  const std::vector<int32_t> zeros = {0, 0};
  a.q_rows = zeros;
  EXPECT_EQ(code(a), StatusCode::kOk);
}

}  // namespace
}  // namespace millipede
