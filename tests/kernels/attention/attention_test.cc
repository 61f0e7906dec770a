#include "kernels/attention/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/attention/merge_state.h"
#include "tests/kernels/kernel_test_util.h"

namespace millipede {
namespace {

using testing::AllClose;
using testing::AllFinite;
using testing::CView;
using testing::kInf;
using testing::kNaN;
using testing::PoisonedF32;
using testing::RandomTensor;
using testing::TensorOf;
using testing::ToFloats;

struct Result {
  HostTensor o;
  HostTensor lse;
};

// Runs AttentionRef on poisoned outputs and checks that it succeeded.
Result Attend(const HostTensor& q, const HostTensor& k, const HostTensor& v, int64_t q_offset,
              int64_t k_offset, AttentionMask mask = AttentionMask::kCausal, float scale = 0.0f) {
  const int64_t n_q = q.shape()[0], heads = q.shape()[1], d = q.shape()[2];
  Result r{PoisonedF32({n_q, heads, d}), PoisonedF32({n_q, heads})};
  AttentionArgs args{CView(q), CView(k), CView(v),   q_offset,    k_offset,
                     mask,     scale,    r.o.view(), r.lse.view()};
  Status status = AttentionRef(args);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return r;
}

// Rows [begin, end) of a [n, heads, d] or [n, heads] F32 tensor, as a new tensor.
HostTensor Rows(const HostTensor& t, int64_t begin, int64_t end) {
  Shape shape = t.shape();
  const int64_t row = t.NumElements() / shape.dims[0];
  shape.dims[0] = end - begin;
  HostTensor out(t.dtype(), shape);
  std::copy_n(static_cast<const unsigned char*>(t.view().data) + begin * row * DTypeSize(t.dtype()),
              (end - begin) * row * DTypeSize(t.dtype()),
              static_cast<unsigned char*>(out.view().data));
  return out;
}

// The textbook definition, independent of the reference's structure: build the full score matrix
// with an explicit mask from positions, softmax each row, multiply by V.
Result BruteForce(const HostTensor& q, const HostTensor& k, const HostTensor& v, int64_t q_offset,
                  int64_t k_offset, AttentionMask mask, double scale) {
  const int64_t n_q = q.shape()[0], hq = q.shape()[1], d = q.shape()[2];
  const int64_t n_kv = k.shape()[0], hk = k.shape()[1];
  const std::vector<float> qf = ToFloats(q), kf = ToFloats(k), vf = ToFloats(v);
  Result r{HostTensor(DType::kF32, {n_q, hq, d}), HostTensor(DType::kF32, {n_q, hq})};
  for (int64_t t = 0; t < n_q; ++t)
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t g = h / (hq / hk);
      std::vector<double> s(n_kv);
      std::vector<bool> visible(n_kv);
      for (int64_t j = 0; j < n_kv; ++j) {
        visible[j] = mask == AttentionMask::kNone || k_offset + j <= q_offset + t;
        double dot = 0;
        for (int64_t c = 0; c < d; ++c)
          dot += double(qf[(t * hq + h) * d + c]) * kf[(j * hk + g) * d + c];
        s[j] = scale * dot;
      }
      // Shifting by the largest visible score keeps exp() finite for any score magnitude.
      double shift = -INFINITY;
      for (int64_t j = 0; j < n_kv; ++j)
        if (visible[j]) shift = std::max(shift, s[j]);
      double sum = 0;
      for (int64_t j = 0; j < n_kv; ++j) sum += visible[j] ? std::exp(s[j] - shift) : 0.0;
      r.lse.data<float>()[t * hq + h] =
          sum == 0 ? -kInf : static_cast<float>(shift + std::log(sum));
      for (int64_t c = 0; c < d; ++c) {
        double o = 0;
        for (int64_t j = 0; j < n_kv; ++j)
          if (visible[j]) o += std::exp(s[j] - shift) / sum * vf[(j * hk + g) * d + c];
        r.o.data<float>()[(t * hq + h) * d + c] = static_cast<float>(o);
      }
    }
  return r;
}

TEST(AttentionTest, HandValues) {
  // One head, head_dim 1, scale 1: q = 1, keys 0 and ln 3 give softmax (1/4, 3/4);
  // v = (2, 6) gives o = 5 and lse = ln 4. At position 0 only key 0 is visible: o = 2, lse = 0.
  HostTensor q = TensorOf(DType::kF32, {2, 1, 1}, {1, 1});
  HostTensor k = TensorOf(DType::kF32, {2, 1, 1}, {0, std::log(3.0f)});
  HostTensor v = TensorOf(DType::kF32, {2, 1, 1}, {2, 6});
  Result r = Attend(q, k, v, 0, 0, AttentionMask::kCausal, 1.0f);
  EXPECT_TRUE(AllClose(ToFloats(r.o), {2, 5}, 1e-6));
  EXPECT_TRUE(AllClose(ToFloats(r.lse), {0, std::log(4.0f)}, 1e-6, 1e-7));
  Result unmasked = Attend(q, k, v, 0, 0, AttentionMask::kNone, 1.0f);
  EXPECT_TRUE(AllClose(ToFloats(unmasked.o), {5, 5}, 1e-6));
}

struct Config {
  int64_t n_q, n_kv, hq, hk, d, q_offset, k_offset;
  AttentionMask mask;
};

class AttentionBruteForceTest : public ::testing::TestWithParam<Config> {};

TEST_P(AttentionBruteForceTest, MatchesTextbookDefinition) {
  const Config c = GetParam();
  HostTensor q = RandomTensor(DType::kF32, {c.n_q, c.hq, c.d}, 1, -2.0f, 2.0f);
  HostTensor k = RandomTensor(DType::kF32, {c.n_kv, c.hk, c.d}, 2, -2.0f, 2.0f);
  HostTensor v = RandomTensor(DType::kF32, {c.n_kv, c.hk, c.d}, 3);
  Result r = Attend(q, k, v, c.q_offset, c.k_offset, c.mask);
  Result expected = BruteForce(q, k, v, c.q_offset, c.k_offset, c.mask, 1.0 / std::sqrt(c.d));
  EXPECT_TRUE(AllClose(r.o, expected.o, 1e-6, 1e-7));
  EXPECT_TRUE(AllClose(r.lse, expected.lse, 1e-6, 1e-7));
  for (float x : ToFloats(r.o)) ASSERT_FALSE(std::isnan(x));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionBruteForceTest,
    ::testing::Values(Config{9, 9, 4, 4, 16, 0, 0, AttentionMask::kCausal},      // MHA prefill
                      Config{9, 9, 8, 2, 16, 0, 0, AttentionMask::kCausal},      // GQA
                      Config{5, 20, 6, 3, 8, 15, 0, AttentionMask::kCausal},     // chunk
                      Config{5, 7, 4, 1, 8, 10, 12, AttentionMask::kCausal},     // partly empty
                      Config{3, 7, 4, 2, 8, 10, 100, AttentionMask::kCausal},    // all empty
                      Config{4, 6, 4, 2, 32, 0, 50, AttentionMask::kNone},       // ring, no mask
                      Config{1, 33, 8, 8, 64, 32, 0, AttentionMask::kCausal}));  // decode

TEST(AttentionTest, GqaEqualsMhaWithRepeatedKv) {
  const int64_t n = 11, hq = 8, hk = 2, d = 16, group = hq / hk;
  HostTensor q = RandomTensor(DType::kF32, {n, hq, d}, 4);
  HostTensor k = RandomTensor(DType::kBF16, {n, hk, d}, 5);
  HostTensor v = RandomTensor(DType::kBF16, {n, hk, d}, 6);
  HostTensor k_rep(DType::kBF16, {n, hq, d}), v_rep(DType::kBF16, {n, hq, d});
  for (int64_t j = 0; j < n; ++j)
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t c = 0; c < d; ++c) {
        k_rep.data<BFloat16>()[(j * hq + h) * d + c] =
            k.data<BFloat16>()[(j * hk + h / group) * d + c];
        v_rep.data<BFloat16>()[(j * hq + h) * d + c] =
            v.data<BFloat16>()[(j * hk + h / group) * d + c];
      }
  Result gqa = Attend(q, k, v, 0, 0), mha = Attend(q, k_rep, v_rep, 0, 0);
  EXPECT_TRUE(AllClose(gqa.o, mha.o, 0.0));
  EXPECT_TRUE(AllClose(gqa.lse, mha.lse, 0.0));
}

// Splits the keys [0, n_kv) at `cuts`, attends to each part with its own k_offset, and merges.
Result SplitAndMerge(const HostTensor& q, const HostTensor& k, const HostTensor& v,
                     int64_t q_offset, const std::vector<int64_t>& cuts) {
  const int64_t n_q = q.shape()[0], hq = q.shape()[1], d = q.shape()[2];
  std::vector<int64_t> bounds = {0};
  bounds.insert(bounds.end(), cuts.begin(), cuts.end());
  bounds.push_back(k.shape()[0]);
  const int64_t parts = static_cast<int64_t>(bounds.size()) - 1;
  HostTensor o_parts = PoisonedF32({parts, n_q, hq, d}), lse_parts = PoisonedF32({parts, n_q, hq});
  for (int64_t p = 0; p < parts; ++p) {
    Result r = Attend(q, Rows(k, bounds[p], bounds[p + 1]), Rows(v, bounds[p], bounds[p + 1]),
                      q_offset, bounds[p]);
    std::copy_n(r.o.data<float>(), r.o.NumElements(),
                o_parts.data<float>() + p * r.o.NumElements());
    std::copy_n(r.lse.data<float>(), r.lse.NumElements(),
                lse_parts.data<float>() + p * r.lse.NumElements());
  }
  Result merged{PoisonedF32({n_q, hq, d}), PoisonedF32({n_q, hq})};
  EXPECT_TRUE(
      MergeStateRef({CView(o_parts), CView(lse_parts), merged.o.view(), merged.lse.view()}).ok());
  return merged;
}

TEST(AttentionTest, SplitKeysMergedEqualWhole) {
  // Queries at positions 20..31 over keys 0..31: the later parts are invisible to early queries,
  // so some partial results are empty (lse = -inf) and must merge as the identity.
  const int64_t n_q = 12, n_kv = 32, hq = 4, hk = 2, d = 32, q_offset = 20;
  HostTensor q = RandomTensor(DType::kF32, {n_q, hq, d}, 7, -2.0f, 2.0f);
  HostTensor k = RandomTensor(DType::kF32, {n_kv, hk, d}, 8, -2.0f, 2.0f);
  HostTensor v = RandomTensor(DType::kF32, {n_kv, hk, d}, 9);
  Result whole = Attend(q, k, v, q_offset, 0);
  for (const std::vector<int64_t>& cuts :
       {std::vector<int64_t>{}, {1}, {7, 19, 25}, {3, 4, 5, 21, 22, 30, 31}, {0, 32}}) {
    Result merged = SplitAndMerge(q, k, v, q_offset, cuts);
    EXPECT_TRUE(AllClose(merged.o, whole.o, 1e-6, 1e-7)) << cuts.size() << " cuts";
    EXPECT_TRUE(AllClose(merged.lse, whole.lse, 1e-6, 1e-7)) << cuts.size() << " cuts";
  }
}

TEST(AttentionTest, RingStepsAccumulatedInPlaceEqualWhole) {
  const int64_t n_q = 8, n_kv = 24, hq = 4, hk = 4, d = 16, q_offset = 16;
  HostTensor q = RandomTensor(DType::kF32, {n_q, hq, d}, 10, -2.0f, 2.0f);
  HostTensor k = RandomTensor(DType::kF32, {n_kv, hk, d}, 11, -2.0f, 2.0f);
  HostTensor v = RandomTensor(DType::kF32, {n_kv, hk, d}, 12);
  Result whole = Attend(q, k, v, q_offset, 0);
  // Start from the empty state (o may hold anything), visit key blocks in ring order.
  HostTensor o = PoisonedF32({n_q, hq, d}),
             lse = TensorOf(DType::kF32, {n_q, hq}, std::vector<float>(n_q * hq, -kInf));
  for (int64_t start : {16, 8, 0}) {
    Result step = Attend(q, Rows(k, start, start + 8), Rows(v, start, start + 8), q_offset, start);
    ASSERT_TRUE(MergeStateInPlaceRef(o.view(), lse.view(), CView(step.o), CView(step.lse)).ok());
  }
  EXPECT_TRUE(AllClose(o, whole.o, 1e-6, 1e-7));
  EXPECT_TRUE(AllClose(lse, whole.lse, 1e-6, 1e-7));
}

TEST(AttentionTest, ChunkedPrefillEqualsWhole) {
  const int64_t n = 37, hq = 6, hk = 2, d = 16;
  HostTensor q = RandomTensor(DType::kF32, {n, hq, d}, 13, -2.0f, 2.0f);
  HostTensor k = RandomTensor(DType::kF16, {n, hk, d}, 14, -2.0f, 2.0f);
  HostTensor v = RandomTensor(DType::kF16, {n, hk, d}, 15);
  Result whole = Attend(q, k, v, 0, 0);
  for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 10}, {10, 25}, {25, 37}}) {
    // A chunk sees the cache up to its own end (later keys do not exist yet).
    Result chunk = Attend(Rows(q, begin, end), Rows(k, 0, end), Rows(v, 0, end), begin, 0);
    EXPECT_TRUE(AllClose(chunk.o, Rows(whole.o, begin, end), 1e-6, 1e-7)) << begin;
    EXPECT_TRUE(AllClose(chunk.lse, Rows(whole.lse, begin, end), 1e-6, 1e-7)) << begin;
  }
}

TEST(AttentionTest, DecodeEqualsLastRowOfPrefill) {
  const int64_t n = 29, hq = 8, hk = 1, d = 64;
  HostTensor q = RandomTensor(DType::kF32, {n, hq, d}, 16);
  HostTensor k = RandomTensor(DType::kBF16, {n, hk, d}, 17);
  HostTensor v = RandomTensor(DType::kBF16, {n, hk, d}, 18);
  Result prefill = Attend(q, k, v, 0, 0);
  Result decode = Attend(Rows(q, n - 1, n), k, v, n - 1, 0);
  EXPECT_TRUE(AllClose(decode.o, Rows(prefill.o, n - 1, n), 1e-6, 1e-7));
  EXPECT_TRUE(AllClose(decode.lse, Rows(prefill.lse, n - 1, n), 1e-6, 1e-7));
}

// Per-KV-head key counts: each head's queries see only its first rows, as if each head were
// attended to alone over those rows (values beyond [0, n_kv] clamp; 0 rows give o = 0, -inf).
TEST(AttentionTest, KvHeadRowsEqualEachHeadAloneOverItsRows) {
  const int64_t n_kv = 10, hq = 8, hk = 4, d = 16, group = hq / hk;
  HostTensor q = RandomTensor(DType::kF32, {2, hq, d}, 60, -2.0f, 2.0f);
  HostTensor k = RandomTensor(DType::kBF16, {n_kv, hk, d}, 61, -2.0f, 2.0f);
  HostTensor v = RandomTensor(DType::kBF16, {n_kv, hk, d}, 62);
  const std::vector<int32_t> rows = {3, 0, 15, -2};  // seen: 3, 0, 10 and 0 rows
  HostTensor head_rows(DType::kI32, {hk});
  std::copy(rows.begin(), rows.end(), head_rows.data<int32_t>());
  for (AttentionMask mask : {AttentionMask::kNone, AttentionMask::kCausal}) {
    Result r{PoisonedF32({2, hq, d}), PoisonedF32({2, hq})};
    AttentionArgs args{CView(q), CView(k), CView(v), 8, 0, mask, 0.0f, r.o.view(), r.lse.view()};
    args.kv_head_rows = CView(head_rows);
    ASSERT_TRUE(AttentionRef(args).ok());
    for (int64_t g = 0; g < hk; ++g) {
      const int64_t m = std::clamp<int64_t>(rows[static_cast<size_t>(g)], 0, n_kv);
      // Head g alone: its queries and its first m rows.
      HostTensor qg(DType::kF32, {2, group, d}), kg(DType::kBF16, {m, 1, d}),
          vg(DType::kBF16, {m, 1, d});
      for (int64_t t = 0; t < 2; ++t)
        std::copy_n(q.data<float>() + (t * hq + g * group) * d, group * d,
                    qg.data<float>() + t * group * d);
      const size_t row = d * DTypeSize(DType::kBF16);
      for (int64_t j = 0; j < m; ++j) {
        std::memcpy(static_cast<char*>(kg.view().data) + j * row,
                    static_cast<const char*>(k.view().data) + (j * hk + g) * row, row);
        std::memcpy(static_cast<char*>(vg.view().data) + j * row,
                    static_cast<const char*>(v.view().data) + (j * hk + g) * row, row);
      }
      Result alone = Attend(qg, kg, vg, 8, 0, mask);
      for (int64_t t = 0; t < 2; ++t)
        for (int64_t i = 0; i < group; ++i) {
          const int64_t h = g * group + i;
          EXPECT_EQ(r.lse.data<float>()[t * hq + h], alone.lse.data<float>()[t * group + i])
              << "head " << h << " query " << t;
          for (int64_t c = 0; c < d; ++c)
            EXPECT_EQ(r.o.data<float>()[(t * hq + h) * d + c],
                      alone.o.data<float>()[(t * group + i) * d + c]);
        }
    }
  }
  Result r{PoisonedF32({2, hq, d}), PoisonedF32({2, hq})};
  AttentionArgs bad{CView(q), CView(k), CView(v), 8, 0, AttentionMask::kNone, 0.0f, r.o.view(),
                    r.lse.view()};
  HostTensor wrong_length(DType::kI32, {hk + 1}), wrong_type(DType::kI64, {hk});
  bad.kv_head_rows = CView(wrong_length);
  EXPECT_EQ(AttentionRef(bad).code(), StatusCode::kInvalidArgument);
  bad.kv_head_rows = CView(wrong_type);
  EXPECT_EQ(AttentionRef(bad).code(), StatusCode::kInvalidArgument);
}

TEST(AttentionTest, EmptyKeySetGivesZeroAndMinusInfinity) {
  const int64_t n_q = 3, hq = 4, hk = 2, d = 8;
  HostTensor q = RandomTensor(DType::kF32, {n_q, hq, d}, 19);
  for (int64_t n_kv : {0, 5}) {
    HostTensor k = RandomTensor(DType::kF32, {n_kv, hk, d}, 20);
    HostTensor v = RandomTensor(DType::kF32, {n_kv, hk, d}, 21);
    // With 5 keys at positions 100..104, queries at 0..2 see none of them.
    Result r = Attend(q, k, v, 0, 100);
    for (float x : ToFloats(r.o)) EXPECT_EQ(x, 0.0f);
    for (float x : ToFloats(r.lse)) EXPECT_EQ(x, -kInf);
  }
}

TEST(AttentionTest, HalfPrecisionKvWithinItsRoundingOfF32) {
  const int64_t n = 40, hq = 4, hk = 2, d = 64;
  HostTensor q = RandomTensor(DType::kF32, {n, hq, d}, 22, -2.0f, 2.0f);
  HostTensor k32 = RandomTensor(DType::kF32, {n, hk, d}, 23, -2.0f, 2.0f);
  HostTensor v32 = RandomTensor(DType::kF32, {n, hk, d}, 24);
  Result exact = Attend(q, k32, v32, 0, 0);
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    HostTensor k(dtype, k32.shape()), v(dtype, v32.shape());
    ASSERT_TRUE(
        ConvertFloats(k32.view().data, DType::kF32, k.view().data, dtype, k.NumElements()).ok());
    ASSERT_TRUE(
        ConvertFloats(v32.view().data, DType::kF32, v.view().data, dtype, v.NumElements()).ok());
    Result half = Attend(q, k, v, 0, 0);
    // Reading the 16-bit KV is exact: same result as F32 KV holding the rounded values.
    HostTensor k_rounded = TensorOf(DType::kF32, k.shape(), ToFloats(k));
    HostTensor v_rounded = TensorOf(DType::kF32, v.shape(), ToFloats(v));
    Result rounded = Attend(q, k_rounded, v_rounded, 0, 0);
    EXPECT_TRUE(AllClose(half.o, rounded.o, 0.0));
    // Against full-precision KV: relative KV error 2^-9 (bf16) moves each score by at most
    // |q|_1 * 2 * 2^-9 / sqrt(d) ~ 0.25 in the worst case; typical errors are far smaller.
    const double tol = dtype == DType::kBF16 ? 2e-2 : 3e-3;
    EXPECT_TRUE(AllClose(half.o, exact.o, 0.0, tol)) << DTypeName(dtype);
    EXPECT_TRUE(AllClose(half.lse, exact.lse, 0.0, tol)) << DTypeName(dtype);
  }
}

TEST(AttentionTest, LargeScoresDoNotOverflow) {
  // Scores around 1e5: exp() of them overflows, the max-subtracted form must not.
  const int64_t n = 6, d = 16;
  HostTensor q = RandomTensor(DType::kF32, {n, 1, d}, 25, 50.0f, 100.0f);
  HostTensor k = RandomTensor(DType::kF32, {n, 1, d}, 26, 50.0f, 100.0f);
  HostTensor v = RandomTensor(DType::kF32, {n, 1, d}, 27);
  Result r = Attend(q, k, v, 0, 0, AttentionMask::kCausal, 10.0f);
  EXPECT_TRUE(AllFinite(r.o));
  EXPECT_TRUE(AllFinite(r.lse));
  for (int64_t t = 0; t < n; ++t) EXPECT_GT(r.lse.data<float>()[t], 1e5f);
  Result expected = BruteForce(q, k, v, 0, 0, AttentionMask::kCausal, 10.0);
  EXPECT_TRUE(AllClose(r.o, expected.o, 1e-6, 1e-7));
  EXPECT_TRUE(AllClose(r.lse, expected.lse, 1e-6));
}

TEST(AttentionTest, ExplicitScaleEqualsDefault) {
  const int64_t n = 5, h = 2, d = 16;
  HostTensor q = RandomTensor(DType::kF32, {n, h, d}, 28);
  HostTensor k = RandomTensor(DType::kF32, {n, h, d}, 29);
  HostTensor v = RandomTensor(DType::kF32, {n, h, d}, 30);
  Result def = Attend(q, k, v, 0, 0), expl = Attend(q, k, v, 0, 0, AttentionMask::kCausal, 0.25f);
  EXPECT_TRUE(AllClose(def.o, expl.o, 0.0));
  Result doubled = Attend(q, k, v, 0, 0, AttentionMask::kCausal, 0.5f);
  Result expected = BruteForce(q, k, v, 0, 0, AttentionMask::kCausal, 0.5);
  EXPECT_TRUE(AllClose(doubled.o, expected.o, 1e-6, 1e-7));
}

TEST(AttentionTest, LseIsOptional) {
  HostTensor q = RandomTensor(DType::kF32, {3, 2, 8}, 31);
  HostTensor k = RandomTensor(DType::kF32, {3, 1, 8}, 32);
  HostTensor v = RandomTensor(DType::kF32, {3, 1, 8}, 33);
  HostTensor o = PoisonedF32({3, 2, 8});
  ASSERT_TRUE(
      AttentionRef({CView(q), CView(k), CView(v), 0, 0, AttentionMask::kCausal, 0.0f, o.view(), {}})
          .ok());
  EXPECT_TRUE(AllClose(o, Attend(q, k, v, 0, 0).o, 0.0));
}

TEST(AttentionTest, RejectsBadArguments) {
  HostTensor q = RandomTensor(DType::kF32, {3, 6, 8}, 1);
  HostTensor k = RandomTensor(DType::kF32, {3, 4, 8}, 2);  // 6 heads over 4 kv heads
  HostTensor k_ok = RandomTensor(DType::kF32, {3, 2, 8}, 2);
  HostTensor v_short = RandomTensor(DType::kF32, {2, 2, 8}, 3);
  HostTensor k_int(DType::kI32, {3, 2, 8});
  HostTensor o = PoisonedF32({3, 6, 8}), lse = PoisonedF32({3, 6});
  auto run = [&](const HostTensor& kk, const HostTensor& vv, float scale) {
    return AttentionRef({CView(q), CView(kk), CView(vv), 0, 0, AttentionMask::kCausal, scale,
                         o.view(), lse.view()});
  };
  EXPECT_EQ(run(k, k, 0.0f).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(run(k_ok, v_short, 0.0f).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(run(k_int, k_ok, 0.0f).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(run(k_ok, k_ok, -1.0f).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(run(k_ok, k_ok, kNaN).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(run(k_ok, k_ok, 0.0f).ok());
}

}  // namespace
}  // namespace millipede
