// A-shape (sink + window) heads in AttentionRef: against an explicit mask built from positions,
// split over key blocks and merged (as ring attention does), and equal to dense when the window
// covers everything.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/attention/attention.h"
#include "kernels/attention/merge_state.h"
#include "tests/kernels/kernel_test_util.h"

namespace millipede {
namespace {

using testing::AllClose;
using testing::CView;
using testing::PoisonedF32;
using testing::RandomTensor;
using testing::ToFloats;

struct Out {
  HostTensor o, lse;
};

Out AttendWindowed(const HostTensor& q, const HostTensor& k, const HostTensor& v, int64_t q_offset,
        int64_t k_offset, const std::vector<int64_t>& windows, int64_t sink) {
  const int64_t n = q.shape()[0], h = q.shape()[1], d = q.shape()[2];
  Out r{PoisonedF32({n, h, d}), PoisonedF32({n, h})};
  AttentionArgs a{CView(q), CView(k), CView(v), q_offset, k_offset, AttentionMask::kCausal, 0.0f,
                  r.o.view(), r.lse.view()};
  a.kv_head_window = windows.data();
  a.sink_tokens = sink;
  Status s = AttentionRef(a);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return r;
}

// Dense softmax over an explicit visibility matrix: causal, then per KV head the sinks and the
// window (window 0 = all).
Out Explicit(const HostTensor& q, const HostTensor& k, const HostTensor& v, int64_t q_offset,
             int64_t k_offset, const std::vector<int64_t>& windows, int64_t sink) {
  const int64_t n = q.shape()[0], hq = q.shape()[1], d = q.shape()[2];
  const int64_t nk = k.shape()[0], hk = k.shape()[1];
  const std::vector<float> qf = ToFloats(q), kf = ToFloats(k), vf = ToFloats(v);
  Out r{HostTensor(DType::kF32, {n, hq, d}), HostTensor(DType::kF32, {n, hq})};
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t g = h / (hq / hk), p = q_offset + t;
      std::vector<bool> seen(nk);
      std::vector<double> s(nk);
      double m = -INFINITY;
      for (int64_t j = 0; j < nk; ++j) {
        const int64_t key = k_offset + j;
        seen[j] = key <= p && (windows[g] == 0 || key < sink || p - key < windows[g]);
        double dot = 0;
        for (int64_t c = 0; c < d; ++c) dot += double(qf[(t * hq + h) * d + c]) * kf[(j * hk + g) * d + c];
        s[j] = dot / std::sqrt(double(d));
        if (seen[j]) m = std::max(m, s[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < nk; ++j) sum += seen[j] ? std::exp(s[j] - m) : 0;
      r.lse.data<float>()[t * hq + h] = sum == 0 ? -INFINITY : float(m + std::log(sum));
      for (int64_t c = 0; c < d; ++c) {
        double o = 0;
        for (int64_t j = 0; j < nk; ++j)
          if (seen[j]) o += std::exp(s[j] - m) / sum * vf[(j * hk + g) * d + c];
        r.o.data<float>()[(t * hq + h) * d + c] = sum == 0 ? 0.0f : float(o);
      }
    }
  return r;
}

TEST(AttentionWindowTest, MatchesTheExplicitMask) {
  const int64_t n = 40, hq = 6, hk = 3, d = 16;
  HostTensor q = RandomTensor(DType::kF32, {n, hq, d}, 1, -2.0f, 2.0f);
  HostTensor k = RandomTensor(DType::kBF16, {n, hk, d}, 2, -2.0f, 2.0f);
  HostTensor v = RandomTensor(DType::kBF16, {n, hk, d}, 3);
  // Mixed heads: dense, a window of 5 with 3 sinks, a window of 1 (only itself and the sinks).
  const std::vector<int64_t> windows = {0, 5, 1};
  for (int64_t q_offset : {0, 17}) {
    Out got = AttendWindowed(q, k, v, q_offset, 0, windows, 3);
    Out want = Explicit(q, k, v, q_offset, 0, windows, 3);
    EXPECT_TRUE(AllClose(got.o, want.o, 1e-5, 1e-6)) << q_offset;
    EXPECT_TRUE(AllClose(got.lse, want.lse, 1e-5, 1e-6)) << q_offset;
  }
}

TEST(AttentionWindowTest, KeyBlocksMergedEqualWhole) {
  // Ring attention attends to key blocks with their own offsets; the window is by position, so
  // the merged blocks must equal one call, including blocks that see nothing.
  const int64_t n = 24, hq = 4, hk = 2, d = 8, q_offset = 40;
  HostTensor q = RandomTensor(DType::kF32, {n, hq, d}, 4, -2.0f, 2.0f);
  HostTensor k = RandomTensor(DType::kF32, {64, hk, d}, 5, -2.0f, 2.0f);
  HostTensor v = RandomTensor(DType::kF32, {64, hk, d}, 6);
  const std::vector<int64_t> windows = {7, 0};
  Out whole = AttendWindowed(q, k, v, q_offset, 0, windows, 4);
  HostTensor o = PoisonedF32({n, hq, d}), lse(DType::kF32, {n, hq});
  for (int64_t i = 0; i < n * hq; ++i) lse.data<float>()[i] = -INFINITY;
  for (int64_t begin : {48, 0, 16, 32}) {
    HostTensor kb(DType::kF32, {16, hk, d}), vb(DType::kF32, {16, hk, d});
    std::copy_n(k.data<float>() + begin * hk * d, 16 * hk * d, kb.data<float>());
    std::copy_n(v.data<float>() + begin * hk * d, 16 * hk * d, vb.data<float>());
    Out part = AttendWindowed(q, kb, vb, q_offset, begin, windows, 4);
    ASSERT_TRUE(MergeStateInPlaceRef(o.view(), lse.view(), CView(part.o), CView(part.lse)).ok());
  }
  EXPECT_TRUE(AllClose(o, whole.o, 1e-6, 1e-7));
  EXPECT_TRUE(AllClose(lse, whole.lse, 1e-6, 1e-7));
}

TEST(AttentionWindowTest, WindowCoveringEverythingIsDense) {
  const int64_t n = 30, hq = 4, hk = 2, d = 16;
  HostTensor q = RandomTensor(DType::kF32, {n, hq, d}, 7, -2.0f, 2.0f);
  HostTensor k = RandomTensor(DType::kF32, {n, hk, d}, 8, -2.0f, 2.0f);
  HostTensor v = RandomTensor(DType::kF32, {n, hk, d}, 9);
  Out dense = AttendWindowed(q, k, v, 0, 0, {0, 0}, 0);
  Out wide = AttendWindowed(q, k, v, 0, 0, {30, 1000}, 0);
  EXPECT_TRUE(AllClose(wide.o, dense.o, 0.0, 0.0));
  Out narrow = AttendWindowed(q, k, v, 0, 0, {2, 2}, 0);
  EXPECT_FALSE(AllClose(narrow.o, dense.o, 1e-3, 1e-3));  // the mask matters
}

TEST(AttentionWindowTest, NegativeWindowOrSinkIsRefused) {
  HostTensor q = RandomTensor(DType::kF32, {2, 2, 8}, 1);
  HostTensor k = RandomTensor(DType::kF32, {2, 1, 8}, 2);
  HostTensor o = PoisonedF32({2, 2, 8});
  const std::vector<int64_t> bad = {-1};
  AttentionArgs a{CView(q), CView(k), CView(k), 0, 0, AttentionMask::kCausal, 0.0f, o.view(), {}};
  a.kv_head_window = bad.data();
  EXPECT_EQ(AttentionRef(a).code(), StatusCode::kInvalidArgument);
  const std::vector<int64_t> good = {1};
  a.kv_head_window = good.data();
  a.sink_tokens = -2;
  EXPECT_EQ(AttentionRef(a).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace millipede
