// BatchDecodeAttentionRef: each sequence's row equals the single-sequence op on its own K/V (a
// decode token sees every key: causal at the last position is the same as no mask), a sequence
// without keys gives o = 0 and lse = -inf, and malformed batches are refused.
#include "kernels/attention/batch_decode_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/attention/attention.h"
#include "tests/kernels/kernel_test_util.h"

namespace millipede {
namespace {

using testing::CView;
using testing::PoisonedF32;
using testing::RandomTensor;

constexpr int64_t kHeads = 8, kKvHeads = 2, kHeadDim = 16;

struct Batch {
  HostTensor q;
  std::vector<HostTensor> k, v;
  std::vector<ConstTensorView> kv_k, kv_v;
};

Batch MakeBatch(const std::vector<int64_t>& lengths, DType kv_dtype, uint64_t seed) {
  Batch b{RandomTensor(DType::kF32, {static_cast<int64_t>(lengths.size()), kHeads, kHeadDim}, seed),
          {}, {}, {}, {}};
  for (size_t i = 0; i < lengths.size(); ++i) {
    b.k.push_back(RandomTensor(kv_dtype, {lengths[i], kKvHeads, kHeadDim}, seed + 10 + i));
    b.v.push_back(RandomTensor(kv_dtype, {lengths[i], kKvHeads, kHeadDim}, seed + 100 + i));
  }
  for (size_t i = 0; i < lengths.size(); ++i) {
    b.kv_k.push_back(CView(b.k[i]));
    b.kv_v.push_back(CView(b.v[i]));
  }
  return b;
}

TEST(BatchDecodeAttentionTest, EachRowIsItsSequencesCausalAttentionAtTheLastPosition) {
  const std::vector<int64_t> lengths = {1, 37, 0, 200, 5};
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    Batch b = MakeBatch(lengths, dtype, 3);
    const int64_t n = static_cast<int64_t>(lengths.size());
    HostTensor o = PoisonedF32({n, kHeads, kHeadDim}), lse = PoisonedF32({n, kHeads});
    ASSERT_TRUE(
        BatchDecodeAttentionRef({CView(b.q), b.kv_k, b.kv_v, 0.0f, o.view(), lse.view()}).ok());
    for (int64_t i = 0; i < n; ++i) {
      const int64_t len = lengths[static_cast<size_t>(i)];
      HostTensor o1 = PoisonedF32({1, kHeads, kHeadDim}), lse1 = PoisonedF32({1, kHeads});
      AttentionArgs one;
      one.q = SliceRows(CView(b.q), i, 1);
      one.k = b.kv_k[static_cast<size_t>(i)];
      one.v = b.kv_v[static_cast<size_t>(i)];
      one.q_offset = std::max<int64_t>(len - 1, 0);
      one.mask = AttentionMask::kCausal;
      one.o = o1.view();
      one.lse = lse1.view();
      ASSERT_TRUE(AttentionRef(one).ok());
      for (int64_t h = 0; h < kHeads; ++h) {
        const float got = lse.data<float>()[i * kHeads + h];
        if (len == 0) {
          EXPECT_TRUE(std::isinf(got) && got < 0) << "sequence " << i;
        } else {
          EXPECT_EQ(got, lse1.data<float>()[h]) << "sequence " << i << " head " << h;
        }
        for (int64_t d = 0; d < kHeadDim; ++d)
          EXPECT_EQ(o.data<float>()[(i * kHeads + h) * kHeadDim + d],
                    len == 0 ? 0.0f : o1.data<float>()[h * kHeadDim + d]);
      }
    }
  }
}

// With windows, each row is its sequence's causal attention at the last position with the same
// sinks and windows (the keys at positions 0 .. n - 1), and a window shorter than the sequence
// changes it.
TEST(BatchDecodeAttentionTest, WindowsAreTheSequencesOwnAtTheLastPosition) {
  const std::vector<int64_t> lengths = {1, 37, 0, 200, 5};
  const std::vector<int64_t> windows = {0, 6};  // KV head 0 sees every key, head 1 a window
  Batch b = MakeBatch(lengths, DType::kF32, 4);
  const int64_t n = static_cast<int64_t>(lengths.size());
  HostTensor o = PoisonedF32({n, kHeads, kHeadDim}), lse = PoisonedF32({n, kHeads});
  HostTensor o_all = PoisonedF32({n, kHeads, kHeadDim}), lse_all = PoisonedF32({n, kHeads});
  BatchDecodeAttentionArgs a{CView(b.q), b.kv_k, b.kv_v, 0.0f, o.view(), lse.view()};
  a.kv_head_window = windows.data();
  a.sink_tokens = 2;
  ASSERT_TRUE(BatchDecodeAttentionRef(a).ok());
  ASSERT_TRUE(
      BatchDecodeAttentionRef({CView(b.q), b.kv_k, b.kv_v, 0.0f, o_all.view(), lse_all.view()})
          .ok());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t len = lengths[static_cast<size_t>(i)];
    if (len == 0) continue;
    HostTensor lse1 = PoisonedF32({1, kHeads});
    HostTensor o1 = PoisonedF32({1, kHeads, kHeadDim});
    AttentionArgs one;
    one.q = SliceRows(CView(b.q), i, 1);
    one.k = b.kv_k[static_cast<size_t>(i)];
    one.v = b.kv_v[static_cast<size_t>(i)];
    one.q_offset = len - 1;
    one.kv_head_window = windows.data();
    one.sink_tokens = 2;
    one.o = o1.view();
    one.lse = lse1.view();
    ASSERT_TRUE(AttentionRef(one).ok());
    for (int64_t h = 0; h < kHeads; ++h) {
      EXPECT_EQ(lse.data<float>()[i * kHeads + h], lse1.data<float>()[h])
          << "sequence " << i << " head " << h;
      // Heads of KV head 0 see everything; those of head 1 lose keys once len > 2 + 6.
      const bool narrowed = h >= kHeads / kKvHeads && len > 8;
      EXPECT_EQ(lse.data<float>()[i * kHeads + h] != lse_all.data<float>()[i * kHeads + h],
                narrowed)
          << "sequence " << i << " head " << h;
    }
  }
}

// With lengths, sequence b sees only the first lengths[b] rows of its views (and, with windows,
// its token sits at lengths[b] - 1): equal to a call on views cut to those rows; the rows beyond
// are never read (NaN there changes nothing). A length outside the view is OutOfRange.
TEST(BatchDecodeAttentionTest, LengthsCutEachSequencesRows) {
  const std::vector<int64_t> rows = {40, 9, 300, 1}, lengths = {33, 0, 300, 1};
  const int64_t n = static_cast<int64_t>(rows.size());
  Batch b = MakeBatch(rows, DType::kBF16, 31);
  for (int64_t i = 0; i < n; ++i)  // poison the rows past each length
    for (int64_t r = lengths[i]; r < rows[i]; ++r)
      for (int64_t e = 0; e < kKvHeads * kHeadDim; ++e) {
        StoreFromFloat(b.k[i].view().data, DType::kBF16, r * kKvHeads * kHeadDim + e, NAN);
        StoreFromFloat(b.v[i].view().data, DType::kBF16, r * kKvHeads * kHeadDim + e, NAN);
      }
  std::vector<ConstTensorView> cut_k, cut_v;
  for (int64_t i = 0; i < n; ++i) {
    cut_k.push_back(SliceRows(b.kv_k[i], 0, lengths[i]));
    cut_v.push_back(SliceRows(b.kv_v[i], 0, lengths[i]));
  }
  HostTensor len(DType::kI64, {n});
  for (int64_t i = 0; i < n; ++i) len.data<int64_t>()[i] = lengths[i];
  const std::vector<int64_t> windows = {0, 5};
  for (bool windowed : {false, true}) {
    HostTensor o_cut = PoisonedF32({n, kHeads, kHeadDim}), lse_cut = PoisonedF32({n, kHeads});
    HostTensor o = PoisonedF32({n, kHeads, kHeadDim}), lse = PoisonedF32({n, kHeads});
    BatchDecodeAttentionArgs cut{CView(b.q), cut_k, cut_v, 0.0f, o_cut.view(), lse_cut.view()};
    BatchDecodeAttentionArgs a{CView(b.q), b.kv_k, b.kv_v, 0.0f, o.view(), lse.view()};
    if (windowed) {
      cut.kv_head_window = a.kv_head_window = windows.data();
      cut.sink_tokens = a.sink_tokens = 2;
    }
    a.lengths = CView(len);
    ASSERT_TRUE(BatchDecodeAttentionRef(cut).ok());
    ASSERT_TRUE(BatchDecodeAttentionRef(a).ok());
    EXPECT_EQ(testing::ToFloats(o), testing::ToFloats(o_cut)) << windowed;
    EXPECT_EQ(testing::ToFloats(lse), testing::ToFloats(lse_cut)) << windowed;
  }
  HostTensor o = PoisonedF32({n, kHeads, kHeadDim});
  BatchDecodeAttentionArgs a{CView(b.q), b.kv_k, b.kv_v, 0.0f, o.view(), {}};
  len.data<int64_t>()[1] = 10;  // sequence 1 has 9 rows
  a.lengths = CView(len);
  EXPECT_EQ(BatchDecodeAttentionRef(a).code(), StatusCode::kOutOfRange);
  HostTensor wrong(DType::kI32, {n});
  a.lengths = CView(wrong);
  EXPECT_EQ(BatchDecodeAttentionCheckArgs(a).code(), StatusCode::kInvalidArgument);
}

// Entries may share a query row (q_rows) and see per-KV-head prefixes of their rows
// (kv_head_rows): each equals the single-sequence op on that row with those counts. Malformed
// rows and counts are refused.
TEST(BatchDecodeAttentionTest, EntriesShareQueryRowsAndCutRowsPerHead) {
  const std::vector<int64_t> lengths = {9, 0, 30, 4};
  Batch b = MakeBatch(lengths, DType::kBF16, 11);  // q has 4 rows; entries read rows 2, 2, 0, 3
  const std::vector<int32_t> q_rows = {2, 2, 0, 3};
  HostTensor rows0(DType::kI32, {kKvHeads}), rows2(DType::kI32, {kKvHeads});
  rows0.data<int32_t>()[0] = 3;
  rows0.data<int32_t>()[1] = 100;  // clamped to the 9 rows
  rows2.data<int32_t>()[0] = 0;    // no row: o = 0, lse = -inf
  rows2.data<int32_t>()[1] = 17;
  const std::vector<ConstTensorView> head_rows = {CView(rows0), {}, CView(rows2), {}};
  const int64_t n = 4;
  HostTensor o = PoisonedF32({n, kHeads, kHeadDim}), lse = PoisonedF32({n, kHeads});
  BatchDecodeAttentionArgs a{CView(b.q), b.kv_k, b.kv_v, 0.0f, o.view(), lse.view()};
  a.q_rows = q_rows;
  a.kv_head_rows = head_rows;
  ASSERT_TRUE(BatchDecodeAttentionRef(a).ok());
  for (int64_t i = 0; i < n; ++i) {
    HostTensor o1 = PoisonedF32({1, kHeads, kHeadDim}), lse1 = PoisonedF32({1, kHeads});
    AttentionArgs one;
    one.q = SliceRows(CView(b.q), q_rows[static_cast<size_t>(i)], 1);
    one.k = b.kv_k[static_cast<size_t>(i)];
    one.v = b.kv_v[static_cast<size_t>(i)];
    one.mask = AttentionMask::kNone;
    one.kv_head_rows = head_rows[static_cast<size_t>(i)];
    one.o = o1.view();
    one.lse = lse1.view();
    ASSERT_TRUE(AttentionRef(one).ok());
    for (int64_t h = 0; h < kHeads; ++h)
      EXPECT_EQ(lse.data<float>()[i * kHeads + h], lse1.data<float>()[h])
          << "entry " << i << " head " << h;
    for (int64_t e = 0; e < kHeads * kHeadDim; ++e)
      EXPECT_EQ(o.data<float>()[i * kHeads * kHeadDim + e], o1.data<float>()[e]) << "entry " << i;
  }
  // Entry 2's KV head 0 sees no row; its head 1 sees 17 of 30 rows.
  EXPECT_TRUE(std::isinf(lse.data<float>()[2 * kHeads]));
  auto refused = [&](BatchDecodeAttentionArgs bad) {
    return BatchDecodeAttentionCheckArgs(bad).code() == StatusCode::kInvalidArgument;
  };
  BatchDecodeAttentionArgs bad = a;
  const std::vector<int32_t> outside = {2, 4, 0, 3};  // q has 4 rows
  bad.q_rows = outside;
  EXPECT_TRUE(refused(bad));
  bad = a;
  bad.q_rows = std::span(q_rows).first(3);  // fewer rows than entries
  EXPECT_TRUE(refused(bad));
  bad = a;
  bad.kv_head_rows = std::span(head_rows).first(2);
  EXPECT_TRUE(refused(bad));
  bad = a;
  const std::vector<int64_t> windows = {0, 3};
  bad.kv_head_window = windows.data();  // counts go with no windows
  EXPECT_TRUE(refused(bad));
  HostTensor wide(DType::kI32, {kKvHeads + 1});
  const std::vector<ConstTensorView> wrong = {CView(wide), {}, {}, {}};
  bad = a;
  bad.kv_head_rows = wrong;
  EXPECT_TRUE(refused(bad));
}

// An indexed entry equals the entry of its rows gathered first (key j of KV head g the flat row
// index[j][g]), beside a plain entry and with per-head counts; an index outside the rows is
// OutOfRange, a malformed one InvalidArgument.
TEST(BatchDecodeAttentionTest, IndexedEntriesReadTheirRowsInPlace) {
  const std::vector<int64_t> lengths = {30, 6};
  Batch b = MakeBatch(lengths, DType::kBF16, 13);
  const int64_t m = 4;
  HostTensor index(DType::kI64, {m, kKvHeads});
  const int64_t chosen[kKvHeads][m] = {{0, 3, 17, 29}, {2, 3, 4, 28}};
  for (int64_t j = 0; j < m; ++j)
    for (int64_t g = 0; g < kKvHeads; ++g)
      index.data<int64_t>()[j * kKvHeads + g] = chosen[g][j] * kKvHeads + g;
  // The same rows gathered by hand.
  HostTensor k(DType::kBF16, {m, kKvHeads, kHeadDim}), v(DType::kBF16, {m, kKvHeads, kHeadDim});
  const size_t row = kHeadDim * 2;
  for (int64_t j = 0; j < m; ++j)
    for (int64_t g = 0; g < kKvHeads; ++g) {
      const int64_t src = chosen[g][j] * kKvHeads + g, dst = j * kKvHeads + g;
      std::memcpy(static_cast<char*>(k.view().data) + dst * row,
                  static_cast<const char*>(b.kv_k[0].data) + src * row, row);
      std::memcpy(static_cast<char*>(v.view().data) + dst * row,
                  static_cast<const char*>(b.kv_v[0].data) + src * row, row);
    }
  HostTensor counts(DType::kI32, {kKvHeads});
  counts.data<int32_t>()[0] = 4;
  counts.data<int32_t>()[1] = 2;
  const std::vector<ConstTensorView> indices = {CView(index), {}};
  const std::vector<ConstTensorView> heads = {CView(counts), {}};
  HostTensor o = PoisonedF32({2, kHeads, kHeadDim}), lse = PoisonedF32({2, kHeads});
  BatchDecodeAttentionArgs a{CView(b.q), b.kv_k, b.kv_v, 0.0f, o.view(), lse.view()};
  a.kv_row_index = indices;
  a.kv_head_rows = heads;
  ASSERT_TRUE(BatchDecodeAttentionRef(a).ok());
  const std::vector<ConstTensorView> gathered_k = {CView(k), b.kv_k[1]};
  const std::vector<ConstTensorView> gathered_v = {CView(v), b.kv_v[1]};
  HostTensor o2 = PoisonedF32({2, kHeads, kHeadDim}), lse2 = PoisonedF32({2, kHeads});
  BatchDecodeAttentionArgs g{CView(b.q), gathered_k, gathered_v, 0.0f, o2.view(), lse2.view()};
  g.kv_head_rows = heads;
  ASSERT_TRUE(BatchDecodeAttentionRef(g).ok());
  EXPECT_EQ(testing::ToFloats(o), testing::ToFloats(o2));
  EXPECT_EQ(testing::ToFloats(lse), testing::ToFloats(lse2));
  index.data<int64_t>()[5] = 30 * kKvHeads;  // past the rows
  EXPECT_EQ(BatchDecodeAttentionRef(a).code(), StatusCode::kOutOfRange);
  HostTensor wrong(DType::kI32, {m, kKvHeads});
  const std::vector<ConstTensorView> bad = {CView(wrong), {}};
  a.kv_row_index = bad;
  EXPECT_EQ(BatchDecodeAttentionCheckArgs(a).code(), StatusCode::kInvalidArgument);
}

TEST(BatchDecodeAttentionTest, LseIsOptional) {
  Batch b = MakeBatch({3, 4}, DType::kF32, 5);
  HostTensor o = PoisonedF32({2, kHeads, kHeadDim});
  ASSERT_TRUE(BatchDecodeAttentionRef({CView(b.q), b.kv_k, b.kv_v, 0.5f, o.view(), {}}).ok());
  for (int64_t i = 0; i < o.NumElements(); ++i) EXPECT_FALSE(std::isnan(o.data<float>()[i]));
}

TEST(BatchDecodeAttentionTest, MalformedBatchesAreRefused) {
  Batch b = MakeBatch({3, 4}, DType::kF32, 7);
  HostTensor o = PoisonedF32({2, kHeads, kHeadDim}), lse = PoisonedF32({2, kHeads});
  auto refused = [&](BatchDecodeAttentionArgs a) {
    return BatchDecodeAttentionCheckArgs(a).code() == StatusCode::kInvalidArgument;
  };
  const BatchDecodeAttentionArgs good{CView(b.q), b.kv_k, b.kv_v, 0.0f, o.view(), lse.view()};
  ASSERT_TRUE(BatchDecodeAttentionCheckArgs(good).ok());
  BatchDecodeAttentionArgs a = good;
  a.k = std::span(b.kv_k).first(1);  // fewer K entries than queries
  EXPECT_TRUE(refused(a));
  HostTensor k_bf16 = RandomTensor(DType::kBF16, {4, kKvHeads, kHeadDim}, 9);
  std::vector<ConstTensorView> mixed = {b.kv_k[0], CView(k_bf16)};
  a = good;
  a.k = mixed;  // K dtypes differ between sequences
  EXPECT_TRUE(refused(a));
  HostTensor k_heads = RandomTensor(DType::kF32, {4, 1, kHeadDim}, 9);
  std::vector<ConstTensorView> heads = {b.kv_k[0], CView(k_heads)};
  a = good;
  a.k = heads;  // KV head counts differ
  EXPECT_TRUE(refused(a));
  a = good;
  a.scale = -1.0f;
  EXPECT_TRUE(refused(a));
  HostTensor o_small = PoisonedF32({1, kHeads, kHeadDim});
  a = good;
  a.o = o_small.view();
  EXPECT_TRUE(refused(a));
}

}  // namespace
}  // namespace millipede
