// FP8 prefill attention on the CPU: the operands op (K per 128-key block, V transposed per
// channel with its key permutation, checked against a layout written out here from the MMA
// fragments, not from the op's own helper) and AttentionFp8Ref against exact attention (its
// error bounded by E4M3's rounding, and not zero), the online-softmax rounding across blocks,
// the refusals.
#include "kernels/attention/attention_fp8.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/fp8.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/attention_fp8_operands.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/op_compare.h"

namespace millipede {
namespace {

using testing::CView;
using testing::MatchesReference;
using testing::PoisonedF32;
using testing::RandomTensor;
using testing::Tolerance;

struct Operands {
  HostTensor k8, k_scale, v8t, v_scale;
  Operands(int64_t n_kv, int64_t heads, int64_t d)
      : k8(DType::kF8E4M3, {n_kv, heads, d}),
        k_scale(DType::kF32, {heads, Fp8AttentionKeyBlocks(n_kv)}),
        v8t(DType::kF8E4M3, {heads, d, Fp8AttentionPaddedKeys(n_kv)}),
        v_scale(DType::kF32, {heads, d}) {}
  Fp8AttentionOperandsArgs Args(const HostTensor& k, const HostTensor& v) {
    return {CView(k), CView(v), k8.view(), k_scale.view(), v8t.view(), v_scale.view()};
  }
};

float At(const HostTensor& t, int64_t i) { return LoadAsFloat(t.view().data, t.dtype(), i); }

// The key of column c of a transposed V row, from the FP8 MMA's fragments: a thread of quad lane
// q holds the A bytes at k 4q .. 4q + 3, which it packs from its score accumulators' keys 2q,
// 2q + 1, 8 + 2q, 9 + 2q (per 16 keys).
int64_t KeyOfColumn(int64_t c) {
  const int64_t group = c / 16, within = c % 16, q = within % 16 / 4, byte = within % 4;
  const int64_t keys[4] = {2 * q, 2 * q + 1, 8 + 2 * q, 9 + 2 * q};
  return 16 * group + keys[byte];
}

TEST(Fp8AttentionOperandsTest, ScalesBlocksAndTheTransposedLayout) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16})
    for (int64_t n_kv : {1, 16, 127, 128, 300}) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " n_kv " << n_kv);
      const int64_t heads = 3, d = 32;
      HostTensor k = RandomTensor(dtype, {n_kv, heads, d}, 5, -3.0f, 3.0f);
      HostTensor v = RandomTensor(dtype, {n_kv, heads, d}, 6, -1.0f, 1.0f);
      // An outlier key in block 0 of head 1, and an all-zero channel (2, 5).
      StoreFromFloat(k.view().data, dtype, (0 * heads + 1) * d + 7, 96.0f);
      for (int64_t j = 0; j < n_kv; ++j)
        StoreFromFloat(v.view().data, dtype, (j * heads + 2) * d + 5, 0.0f);
      Operands ops(n_kv, heads, d);
      ASSERT_TRUE(Fp8AttentionOperandsRef(ops.Args(k, v)).ok());
      const int64_t blocks = Fp8AttentionKeyBlocks(n_kv), padded = Fp8AttentionPaddedKeys(n_kv);
      for (int64_t g = 0; g < heads; ++g)
        for (int64_t b = 0; b < blocks; ++b) {
          float amax = 0.0f;
          for (int64_t j = 128 * b; j < std::min(n_kv, 128 * b + 128); ++j)
            for (int64_t i = 0; i < d; ++i)
              amax = std::max(amax, std::fabs(At(k, (j * heads + g) * d + i)));
          const float scale = ops.k_scale.data<float>()[g * blocks + b];
          EXPECT_EQ(scale, amax / 448.0f);
          for (int64_t j = 128 * b; j < std::min(n_kv, 128 * b + 128); ++j)
            for (int64_t i = 0; i < d; ++i) {
              const int64_t at = (j * heads + g) * d + i;
              const float x = At(k, at),
                          y = E4M3BitsToFloat(static_cast<uint8_t*>(ops.k8.view().data)[at]) *
                              scale;
              // Half an E4M3 step: 2^-4 relative, or 2^-10 of the scale below the normals.
              EXPECT_LE(std::fabs(x - y),
                        std::max(std::fabs(x) / 16.0f, scale / 1024.0f) * 1.0001f);
            }
        }
      EXPECT_EQ(ops.k_scale.data<float>()[1 * blocks], 96.0f / 448.0f);
      for (int64_t g = 0; g < heads; ++g)
        for (int64_t i = 0; i < d; ++i) {
          float amax = 0.0f;
          for (int64_t j = 0; j < n_kv; ++j)
            amax = std::max(amax, std::fabs(At(v, (j * heads + g) * d + i)));
          const float scale = ops.v_scale.data<float>()[g * d + i];
          EXPECT_EQ(scale, amax > 0 ? amax / 448.0f : 1.0f);
          const uint8_t* row =
              static_cast<const uint8_t*>(ops.v8t.view().data) + (g * d + i) * padded;
          for (int64_t c = 0; c < padded; ++c) {
            const int64_t j = KeyOfColumn(c);
            if (j >= n_kv) {
              EXPECT_EQ(row[c], 0) << "padding column " << c;
              continue;
            }
            const float x = At(v, (j * heads + g) * d + i), y = E4M3BitsToFloat(row[c]) * scale;
            EXPECT_LE(std::fabs(x - y), std::max(std::fabs(x) / 16.0f, scale / 1024.0f) * 1.0001f)
                << "head " << g << " channel " << i << " column " << c << " (key " << j << ")";
          }
        }
      EXPECT_EQ(ops.v_scale.data<float>()[2 * d + 5], 1.0f);
    }
}

TEST(Fp8AttentionOperandsTest, RefusesBadShapesAndTypes) {
  HostTensor k = RandomTensor(DType::kBF16, {10, 2, 16}, 1),
             v = RandomTensor(DType::kBF16, {10, 2, 16}, 2);
  Operands ops(10, 2, 16);
  Fp8AttentionOperandsArgs args = ops.Args(k, v);
  HostTensor k8 = RandomTensor(DType::kF8E4M3, {10, 2, 16}, 3);
  args.k = CView(k8);
  EXPECT_EQ(Fp8AttentionOperandsRef(args).code(), StatusCode::kInvalidArgument);
  args = ops.Args(k, v);
  HostTensor short_v8t(DType::kF8E4M3, {2, 16, 64});
  args.v8t = short_v8t.view();
  EXPECT_EQ(Fp8AttentionOperandsRef(args).code(), StatusCode::kInvalidArgument);
}

struct Case {
  int64_t n_q, n_kv, q_heads, kv_heads, d, q_offset;
  AttentionMask mask = AttentionMask::kCausal;
};

struct Result {
  HostTensor o, lse;
};

Result RunAttention(const Case& c, const HostTensor& q, const HostTensor& k, const HostTensor& v,
                    bool fp8) {
  Result r{PoisonedF32({c.n_q, c.q_heads, c.d}), PoisonedF32({c.n_q, c.q_heads})};
  const AttentionArgs args{CView(q), CView(k), CView(v),   c.q_offset,  0,
                           c.mask,   0.0f,     r.o.view(), r.lse.view()};
  const Status status = fp8 ? AttentionFp8Ref(args) : AttentionRef(args);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return r;
}

// Against exact attention: E4M3 keeps 3 mantissa bits, so scores move by a few percent of their
// spread and every probability by up to 1/16. With uniform random V, o is itself an average of
// noise, so its error relative to max |o| is about P's own: o within 10% of max |o| (measured up
// to 6.2%, RMS 5%), lse within 0.1 (measured 0.005). The error is not zero: the op did round.
TEST(AttentionFp8RefTest, StaysWithinE4M3RoundingOfExactAttention) {
  for (const Case& c :
       {Case{37, 37, 4, 1, 64, 0}, Case{200, 300, 8, 2, 128, 100}, Case{64, 700, 4, 4, 32, 636},
        Case{50, 260, 2, 1, 64, 0, AttentionMask::kNone}}) {
    SCOPED_TRACE(::testing::Message() << "n_q " << c.n_q << " n_kv " << c.n_kv);
    const HostTensor q = RandomTensor(DType::kF32, {c.n_q, c.q_heads, c.d}, 11, -2.0f, 2.0f);
    const HostTensor k = RandomTensor(DType::kBF16, {c.n_kv, c.kv_heads, c.d}, 12, -2.0f, 2.0f);
    const HostTensor v = RandomTensor(DType::kBF16, {c.n_kv, c.kv_heads, c.d}, 13);
    const Result exact = RunAttention(c, q, k, v, false), fp8 = RunAttention(c, q, k, v, true);
    EXPECT_TRUE(MatchesReference(fp8.o, exact.o, Tolerance::Normalised(0.1), "o"));
    EXPECT_TRUE(MatchesReference(fp8.lse, exact.lse, Tolerance::Elementwise(0.0, 0.1), "lse"));
    double worst = 0.0;
    for (int64_t i = 0; i < exact.o.NumElements(); ++i)
      worst = std::max(
          worst, static_cast<double>(std::fabs(fp8.o.data<float>()[i] - exact.o.data<float>()[i])));
    EXPECT_GT(worst, 1e-4) << "no rounding at all: the FP8 path was not taken";
  }
}

// Values E4M3 holds exactly: the scores are exact, so what remains is P's rounding, of
// 256 exp(x - m) against the running maximum m of the blocks so far. One query; key 0 (block 0)
// scores 2, key 129 (block 1) 3, the rest -56. Block 0 gives key 0 P = 256 exactly (m = 2);
// block 1 raises m to 3 and scales it by e^-1 in fp32. Rounded against the final maximum
// instead, key 0 would weigh E4M3(256 e^-1) = 96 rather than 94.18: 2% off.
TEST(AttentionFp8RefTest, RoundsProbabilitiesAgainstTheRunningMaximum) {
  const int64_t n_kv = 130, d = 16;
  HostTensor q(DType::kF32, {1, 1, d}), k(DType::kF32, {n_kv, 1, d}), v(DType::kF32, {n_kv, 1, d});
  std::fill_n(q.data<float>(), d, 0.0f);
  std::fill_n(k.data<float>(), n_kv * d, 0.0f);
  std::fill_n(v.data<float>(), n_kv * d, 0.0f);
  q.data<float>()[0] = 4.0f;  // E4M3 448 at scale 4 / 448
  // Both blocks' largest |k| is 56: scale 1/8, so 2, 3 and -56 become 16, 24 and -448.
  for (int64_t j = 0; j < n_kv; ++j) k.data<float>()[j * d] = -56.0f;
  k.data<float>()[0] = 2.0f;
  k.data<float>()[129 * d] = 3.0f;
  v.data<float>()[0 * d + 1] = 1.0f;    // key 0 -> channel 1
  v.data<float>()[129 * d + 2] = 1.0f;  // key 129 -> channel 2
  HostTensor o = PoisonedF32({1, 1, d}), lse = PoisonedF32({1, 1});
  // Softmax scale 1/4: x_j = q.k_j / 4 = k_j[0].
  const AttentionArgs args{CView(q), CView(k), CView(v),  n_kv - 1, 0, AttentionMask::kCausal,
                           0.25f,    o.view(), lse.view()};
  ASSERT_TRUE(AttentionFp8Ref(args).ok());
  const double denominator = std::exp(-1.0) + 1.0;  // the -56 keys add ~1e-25
  EXPECT_NEAR(o.data<float>()[1], std::exp(-1.0) / denominator, 1e-6);
  EXPECT_NEAR(o.data<float>()[2], 1.0 / denominator, 1e-6);
  EXPECT_NEAR(lse.data<float>()[0], 3.0 + std::log(denominator), 1e-6);
}

TEST(AttentionFp8RefTest, RefusesWhatItDoesNotTake) {
  const HostTensor q = RandomTensor(DType::kF32, {4, 2, 16}, 1);
  const HostTensor k = RandomTensor(DType::kBF16, {4, 1, 16}, 2),
                   v = RandomTensor(DType::kBF16, {4, 1, 16}, 3);
  const HostTensor k8 = RandomTensor(DType::kF8E4M3, {4, 1, 16}, 4);
  HostTensor o = PoisonedF32({4, 2, 16});
  AttentionArgs args{CView(q), CView(k), CView(v), 0, 0, AttentionMask::kCausal,
                     0.0f,     o.view(), {}};
  const int64_t window[1] = {2};
  args.kv_head_window = window;
  EXPECT_EQ(AttentionFp8Ref(args).code(), StatusCode::kUnimplemented);
  args.kv_head_window = nullptr;
  args.k = CView(k8);
  EXPECT_EQ(AttentionFp8Ref(args).code(), StatusCode::kInvalidArgument);
  args.k = CView(k);
  EXPECT_TRUE(AttentionFp8Ref(args).ok());
}

}  // namespace
}  // namespace millipede
