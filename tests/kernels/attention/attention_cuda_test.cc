// AttentionCuda against AttentionRef, which gets the same 16-bit K/V values: random inputs over
// query and key counts around the 64- and 128-key tiles, both tensor-core prefill kernels
// (wgmma and mma.sync), long causal prefill, offsets (including chunks that see no key), GQA
// ratios, head dims (64 and 128 on the tensor cores, 16, 32 and 80 on the CUDA cores), both
// masks, K/V dtypes, long decode with split-KV, per-KV-head key counts, A-shape (sink + window)
// heads, and splits against no splits; FP8 (E4M3) K/V on both tensor-core kernels (widened in
// shared memory) and the CUDA cores, prefill, decode and split. Outputs start
// NaN-poisoned between guard bands, so unwritten elements and stray writes both fail. Skips
// without a GPU.
#include "kernels/attention/attention_cuda.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kernels/attention/attention.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/op_harness.h"

namespace millipede {
namespace {

using testing::CView;
using testing::DeviceTensor;
using testing::kInf;
using testing::MatchesReference;
using testing::PoisonedF32;
using testing::RandomTensor;
using testing::Tolerance;

// The tensor-core path rounds q and the probabilities to bf16 (attention_cuda.h): expected errors
// are a few 1e-3 of max |o| and ~1e-3 in lse; the fp32 CUDA-core path is far inside both.
constexpr double kMaxOError = 2e-2;    // max |o - o_ref| / max |o_ref|
constexpr double kMaxLseError = 2e-2;  // max |lse - lse_ref|
// Split against whole on the same inputs: only the rounding of P, taken relative to a different
// running max, and the order of fp32 sums differ.
constexpr double kMaxSplitOError = 1e-2;
constexpr double kMaxSplitLseError = 1e-4;

struct Case {
  int64_t n_q, n_kv, num_q_heads, num_kv_heads, head_dim, q_offset, k_offset;
  AttentionMask mask = AttentionMask::kCausal;
  DType k_dtype = DType::kBF16;
  DType v_dtype = DType::kBF16;
  float scale = 0.0f;
  bool want_lse = true;
  // false keeps prefill on the mma.sync kernel instead of the Hopper wgmma kernel.
  bool allow_wgmma = true;
  std::vector<int32_t> head_rows{};  // AttentionArgs::kv_head_rows per KV head; empty: none
  std::vector<int64_t> windows{};    // AttentionArgs::kv_head_window per KV head; empty: none
  int64_t sink = 0;                  // AttentionArgs::sink_tokens
};

// `c` with A-shape windows per KV head and `sink` sinks.
Case Windowed(Case c, std::vector<int64_t> windows, int64_t sink) {
  c.windows = std::move(windows);
  c.sink = sink;
  return c;
}

// The window and sink arguments of a case.
void SetWindows(const Case& c, AttentionArgs& args) {
  if (c.windows.empty()) return;
  args.kv_head_window = c.windows.data();
  args.sink_tokens = c.sink;
}

HostTensor HeadRows(const Case& c) {
  HostTensor t(DType::kI32, {static_cast<int64_t>(c.head_rows.size())});
  std::copy(c.head_rows.begin(), c.head_rows.end(), t.data<int32_t>());
  return t;
}

std::string Name(const Case& c) {
  std::ostringstream name;
  name << "q" << c.n_q << "_kv" << c.n_kv << "_h" << c.num_q_heads << "x" << c.num_kv_heads << "_d"
       << c.head_dim << "_" << DTypeName(c.k_dtype) << "_" << DTypeName(c.v_dtype) << "_at"
       << c.q_offset << "_" << c.k_offset
       << (c.mask == AttentionMask::kCausal ? "_causal" : "_nomask");
  if (c.scale != 0.0f) name << "_scaled";
  if (!c.want_lse) name << "_nolse";
  if (!c.allow_wgmma) name << "_mmasync";
  if (!c.head_rows.empty()) name << "_headrows";
  if (!c.windows.empty()) {
    name << "_sink" << c.sink << "_win";
    for (int64_t w : c.windows) name << "_" << w;
  }
  return name.str();
}

struct Inputs {
  HostTensor q, k, v;
};

// Scores of std ~1.3 (q, k uniform in [-2, 2], scale 1/sqrt(d)): peaked enough for the max to
// matter, flat enough for many keys to contribute.
Inputs MakeInputs(const Case& c) {
  return {RandomTensor(DType::kF32, {c.n_q, c.num_q_heads, c.head_dim}, 101, -2.0f, 2.0f),
          RandomTensor(c.k_dtype, {c.n_kv, c.num_kv_heads, c.head_dim}, 102, -2.0f, 2.0f),
          RandomTensor(c.v_dtype, {c.n_kv, c.num_kv_heads, c.head_dim}, 103)};
}

struct Outputs {
  HostTensor o, lse;
};

Outputs RunCuda(const Case& c, const Inputs& in, AttentionCudaOptions options = {}) {
  options.allow_wgmma = c.allow_wgmma;
  DeviceTensor q(in.q), k(in.k), v(in.v);
  DeviceTensor o(PoisonedF32({c.n_q, c.num_q_heads, c.head_dim}));
  DeviceTensor lse(PoisonedF32({c.n_q, c.num_q_heads}));
  DeviceTensor head_rows(HeadRows(c));
  AttentionArgs args{q.cview(),  k.cview(),  v.cview(),
                     c.q_offset, c.k_offset, c.mask,
                     c.scale,    o.view(),   c.want_lse ? lse.view() : TensorView{}};
  if (!c.head_rows.empty()) args.kv_head_rows = head_rows.cview();
  SetWindows(c, args);
  const Status status = AttentionCuda(args, options, nullptr);
  EXPECT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return {o.Read(), lse.Read()};
}

// Rows [begin, end) of a tensor, as a new tensor.
HostTensor Rows(const HostTensor& t, int64_t begin, int64_t end) {
  Shape shape = t.shape();
  const size_t row_bytes = t.NumBytes() / shape.dims[0];
  shape.dims[0] = end - begin;
  HostTensor out(t.dtype(), shape);
  std::memcpy(out.view().data, static_cast<const unsigned char*>(t.view().data) + begin * row_bytes,
              (end - begin) * row_bytes);
  return out;
}

// Query rows the reference runs on: all, or for long runs the first, a middle and the last 64
// (AttentionRef costs n_q * n_kv * head_dim in double; these cover the first, a middle and the
// last query tile, causal diagonal included).
std::vector<std::pair<int64_t, int64_t>> CheckedRows(int64_t n_q) {
  if (n_q <= 512) return {{0, n_q}};
  return {{0, 64}, {n_q / 2 - 32, n_q / 2 + 32}, {n_q - 64, n_q}};
}

// The parts one after the other along the first dimension, as a new tensor.
HostTensor Concat(const std::vector<HostTensor>& parts) {
  Shape shape = parts.front().shape();
  shape.dims[0] = 0;
  for (const HostTensor& p : parts) shape.dims[0] += p.shape().dims[0];
  HostTensor out(parts.front().dtype(), shape);
  unsigned char* dst = static_cast<unsigned char*>(out.view().data);
  for (const HostTensor& p : parts) {
    std::memcpy(dst, p.view().data, p.NumBytes());
    dst += p.NumBytes();
  }
  return out;
}

// o within kMaxOError of max |o_ref| (and its NMSE within the square), lse within kMaxLseError,
// over the checked rows; -inf (rows that see no key) must match exactly and NaN fails.
void ExpectMatchesReference(const Case& c, const Inputs& in, const Outputs& out) {
  const int64_t heads = c.num_q_heads, d = c.head_dim;
  std::vector<HostTensor> o, lse, o_ref, lse_ref;
  const HostTensor head_rows = HeadRows(c);
  for (const auto& [begin, end] : CheckedRows(c.n_q)) {
    const HostTensor q = Rows(in.q, begin, end);
    o_ref.push_back(PoisonedF32({end - begin, heads, d}));
    lse_ref.push_back(PoisonedF32({end - begin, heads}));
    AttentionArgs args{CView(q), CView(in.k), CView(in.v),         c.q_offset + begin,   c.k_offset,
                       c.mask,   c.scale,     o_ref.back().view(), lse_ref.back().view()};
    if (!c.head_rows.empty()) args.kv_head_rows = CView(head_rows);
    SetWindows(c, args);
    const Status status = AttentionRef(args);
    ASSERT_TRUE(status.ok()) << status.ToString();
    o.push_back(Rows(out.o, begin, end));
    lse.push_back(Rows(out.lse, begin, end));
  }
  EXPECT_TRUE(MatchesReference(Concat(o), Concat(o_ref), Tolerance::Normalised(kMaxOError), "o"));
  if (c.want_lse) {
    EXPECT_TRUE(MatchesReference(Concat(lse), Concat(lse_ref),
                                 Tolerance::Elementwise(0.0, kMaxLseError), "lse"));
  }
}

// Over every row: each element was written (outputs start as NaN); a query that sees no key has
// exactly o = 0 and lse = -inf and every other row is finite; without an lse tensor nothing was
// written to the poisoned one.
void ExpectEveryRowWritten(const Case& c, const Outputs& out) {
  const int64_t heads = c.num_q_heads, d = c.head_dim;
  int64_t bad = 0;
  auto fail = [&](int64_t t, int64_t h, const char* what) {
    if (bad++ == 0) ADD_FAILURE() << "query " << t << ", head " << h << ": " << what;
  };
  for (int64_t t = 0; t < c.n_q; ++t) {
    const int64_t all_visible =
        c.mask == AttentionMask::kNone
            ? c.n_kv
            : std::clamp<int64_t>(c.q_offset + t - c.k_offset + 1, 0, c.n_kv);
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t g = h / (heads / c.num_kv_heads);
      const int64_t rows =
          c.head_rows.empty()
              ? all_visible
              : std::clamp<int64_t>(c.head_rows[static_cast<size_t>(g)], 0, all_visible);
      // Of those, an A-shape head sees the sinks and its window.
      const int64_t window = c.windows.empty() ? 0 : c.windows[static_cast<size_t>(g)];
      int64_t visible = rows;
      if (window > 0) {
        const int64_t sinks = std::clamp<int64_t>(c.sink - c.k_offset, 0, rows);
        const int64_t start =
            std::clamp<int64_t>(c.q_offset + t - window + 1 - c.k_offset, sinks, rows);
        visible = sinks + rows - start;
      }
      const float* o = out.o.data<float>() + (t * heads + h) * d;
      const float lse = out.lse.data<float>()[t * heads + h];
      for (int64_t i = 0; i < d; ++i) {
        if (visible == 0 && o[i] != 0.0f) fail(t, h, "o of an empty row is not 0");
        if (!std::isfinite(o[i])) fail(t, h, "o is not finite (unwritten?)");
      }
      if (!c.want_lse) {
        if (!std::isnan(lse)) fail(t, h, "lse written although not requested");
      } else if (visible == 0 ? lse != -kInf : !std::isfinite(lse)) {
        fail(t, h, "lse is not -inf exactly for an empty row, or not finite otherwise");
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

class AttentionCudaTest : public testing::GpuOpTest<Case> {};

TEST_P(AttentionCudaTest, MatchesReference) {
  const Case c = GetParam();
  const Inputs in = MakeInputs(c);
  const Outputs out = RunCuda(c, in);
  ExpectEveryRowWritten(c, out);
  ExpectMatchesReference(c, in, out);
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) { return Name(info.param); }

constexpr AttentionMask kCausal = AttentionMask::kCausal;
constexpr AttentionMask kNone = AttentionMask::kNone;

// Query and key counts on both sides of the 64-key tile and of the 16/128-row query tiles,
// queries ending with the keys (chunked prefill; with more queries than keys the first ones see
// nothing). Tensor cores at head_dim 128 with GQA 4, and the CUDA cores at head_dim 16.
std::vector<Case> SizeCases() {
  std::vector<Case> cases;
  for (int64_t n_q : {1, 63, 65, 4097})
    for (int64_t n_kv : {1, 63, 65, 4097}) {
      const int64_t q_offset = 5000 + n_kv - n_q, k_offset = 5000;
      for (AttentionMask mask : {kCausal, kNone})
        cases.push_back({n_q, n_kv, 8, 2, 128, q_offset, k_offset, mask});
      cases.push_back({n_q, n_kv, 4, 1, 16, q_offset, k_offset, kCausal});
    }
  return cases;
}
INSTANTIATE_TEST_SUITE_P(Sizes, AttentionCudaTest, ::testing::ValuesIn(SizeCases()), CaseName);

// Head dims, GQA ratios 1, 4, 8 and K/V dtypes on a 130-query chunk after 170 earlier keys.
std::vector<Case> HeadCases() {
  std::vector<Case> cases;
  for (int64_t d : {64, 128})
    for (int64_t group : {1, 4, 8})
      for (DType dtype : {DType::kBF16, DType::kF16, DType::kF8E4M3})
        for (AttentionMask mask : {kCausal, kNone})
          cases.push_back({130, 300, 2 * group, 2, d, 170, 0, mask, dtype, dtype});
  // The CUDA-core path: small and odd head dims, F32 and mixed K/V at a tensor-core head dim.
  for (int64_t d : {16, 32, 80})
    for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32, DType::kF8E4M3})
      cases.push_back({130, 300, 4, 2, d, 170, 0, kCausal, dtype, dtype});
  cases.push_back({130, 300, 8, 2, 64, 170, 0, kCausal, DType::kF32, DType::kF32});
  cases.push_back({130, 300, 8, 2, 128, 170, 0, kCausal, DType::kBF16, DType::kF32});
  cases.push_back({130, 300, 8, 2, 128, 170, 0, kCausal, DType::kF16, DType::kBF16});
  cases.push_back({130, 300, 8, 2, 128, 170, 0, kCausal, DType::kF8E4M3, DType::kBF16});
  return cases;
}
INSTANTIATE_TEST_SUITE_P(Heads, AttentionCudaTest, ::testing::ValuesIn(HeadCases()), CaseName);

std::vector<Case> OffsetCases() {
  return {
      // Queries after every key: all keys visible under the causal mask.
      {65, 63, 8, 2, 128, 1000, 0, kCausal},
      // The chunk lies entirely before the keys: every row empty (o = 0, lse = -inf)...
      {63, 65, 8, 2, 128, 0, 1000, kCausal},
      {63, 65, 4, 4, 64, 0, 1000, kCausal, DType::kF16, DType::kF16},
      {63, 65, 4, 2, 16, 0, 1000, kCausal},
      // ... but sees all of them without a mask.
      {63, 65, 8, 2, 128, 0, 1000, kNone},
      // The keys start inside the chunk: its first 70 rows are empty.
      {130, 200, 8, 2, 128, 0, 70, kCausal},
      {130, 200, 16, 2, 64, 0, 70, kCausal},
      // Keys run past the chunk's last query (skipped tiles).
      {100, 400, 8, 2, 128, 37, 0, kCausal},
      // Explicit scale; no LSE wanted; no keys at all.
      {65, 130, 8, 2, 128, 65, 0, kCausal, DType::kBF16, DType::kBF16, 0.3f},
      {65, 130, 8, 2, 128, 65, 0, kCausal, DType::kBF16, DType::kBF16, 0.0f, false},
      {65, 0, 8, 2, 128, 0, 0, kCausal},
      {65, 0, 8, 2, 128, 0, 0, kNone},
      // Queries see only the first quarter of the keys: with splits, later splits are empty.
      {65, 4097, 8, 2, 128, 1000, 0, kCausal},
  };
}
INSTANTIATE_TEST_SUITE_P(Offsets, AttentionCudaTest, ::testing::ValuesIn(OffsetCases()), CaseName);

// The same prefill cases on the mma.sync kernel, which the wgmma kernel replaces for prefill
// on Hopper (it still runs decode, and prefill elsewhere).
std::vector<Case> MmaSyncCases() {
  std::vector<Case> cases;
  for (const std::vector<Case>& set : {SizeCases(), HeadCases(), OffsetCases()})
    for (Case c : set)
      if ((c.head_dim == 64 || c.head_dim == 128) && c.k_dtype == c.v_dtype &&
          c.k_dtype != DType::kF32) {
        c.allow_wgmma = false;
        cases.push_back(c);
      }
  return cases;
}
INSTANTIATE_TEST_SUITE_P(MmaSync, AttentionCudaTest, ::testing::ValuesIn(MmaSyncCases()),
                         CaseName);

// Long causal prefill: hundreds of key tiles through the stage ring, GQA 4 and 8, both dtypes
// and head dims, a chunk that starts after earlier keys (ring step), and one that ends before
// the last keys (skipped tiles).
std::vector<Case> LongCases() {
  return {
      {8192, 8192, 32, 8, 128, 0, 0, kCausal},
      {8192, 8192, 16, 2, 64, 0, 0, kCausal, DType::kF16, DType::kF16},
      {3000, 20000, 32, 8, 128, 17000, 0, kCausal},
      {3000, 20000, 8, 2, 128, 9000, 0, kCausal, DType::kF16, DType::kF16},
      {2048, 6000, 32, 8, 128, 0, 0, kNone},
      // FP8: the widening producer over many stages, at both head dims.
      {8192, 8192, 32, 8, 128, 0, 0, kCausal, DType::kF8E4M3, DType::kF8E4M3},
      {3000, 20000, 8, 2, 64, 17000, 0, kCausal, DType::kF8E4M3, DType::kF8E4M3},
  };
}
INSTANTIATE_TEST_SUITE_P(Long, AttentionCudaTest, ::testing::ValuesIn(LongCases()), CaseName);

// Decode over a long context: the grid is too small for the SMs, so the keys are split.
std::vector<Case> DecodeCases() {
  return {
      {1, 100000, 32, 8, 128, 100000, 0, kNone},
      {1, 100000, 32, 8, 128, 99999, 0, kCausal},
      {1, 100000, 32, 8, 128, 99999, 0, kCausal, DType::kBF16, DType::kBF16, 0.0f, false},
      {1, 100000, 8, 8, 64, 99999, 0, kCausal, DType::kF16, DType::kF16},
      {1, 100000, 32, 8, 128, 99999, 0, kCausal, DType::kF8E4M3, DType::kF8E4M3},
      {1, 4097, 8, 8, 64, 4096, 0, kNone, DType::kF8E4M3, DType::kF8E4M3},
      // Four queries (speculative decoding) of GQA 8: 32 rows, the prefill tile, split.
      {4, 100000, 16, 2, 128, 99996, 0, kCausal},
  };
}
INSTANTIATE_TEST_SUITE_P(Decode, AttentionCudaTest, ::testing::ValuesIn(DecodeCases()), CaseName);

// Per-KV-head key counts (OmniKV's chosen rows, padded to the head with most): heads that see
// none, one, a tile and one more, most and all (and counts out of range), on the split decode
// kernel, both prefill kernels and the CUDA cores.
std::vector<Case> HeadRowsCases() {
  const std::vector<int32_t> eight = {2048, 0, 1, 64, 65, 2000, 3000, -1};
  Case decode{1, 2048, 32, 8, 128, 5000, 0, kNone};
  decode.head_rows = eight;
  Case causal_decode{1, 2048, 32, 8, 128, 2047, 0, kCausal};
  causal_decode.head_rows = {2048, 100, 0, 7, 1999, 2048, 64, 640};
  Case prefill{300, 9000, 32, 8, 128, 8700, 0, kCausal};
  prefill.head_rows = {9000, 0, 8800, 8701, 64, 4000, 1, 9001};
  Case mma_sync = prefill;
  mma_sync.allow_wgmma = false;
  Case generic{3, 300, 4, 2, 80, 400, 0, kNone, DType::kF32, DType::kF32};
  generic.head_rows = {17, 0};
  Case fp8_decode = decode;
  fp8_decode.k_dtype = fp8_decode.v_dtype = DType::kF8E4M3;
  Case fp8_prefill = prefill;
  fp8_prefill.k_dtype = fp8_prefill.v_dtype = DType::kF8E4M3;
  Case fp8_mma_sync = fp8_prefill;
  fp8_mma_sync.allow_wgmma = false;
  return {decode, causal_decode, prefill, mma_sync, generic, fp8_decode, fp8_prefill, fp8_mma_sync};
}
INSTANTIATE_TEST_SUITE_P(HeadRows, AttentionCudaTest, ::testing::ValuesIn(HeadRowsCases()),
                         CaseName);

// A-shape (sink + window) heads beside dense ones: windows below, at and across the 64/128-key
// tiles and longer than the keys, sinks of 0, 1 and several tiles, windows that start inside the
// sinks, a chunk whose keys start after the sinks (ring step) and one whose window misses every
// key, on the wgmma, mma.sync (prefill and decode shapes) and CUDA-core kernels, with both masks.
std::vector<Case> WindowCases() {
  const std::vector<int64_t> eight = {0, 1, 64, 100, 0, 128, 700, 100000};
  std::vector<Case> cases;
  for (bool wgmma : {true, false}) {
    Case prefill = Windowed({2048, 6000, 32, 8, 128, 3952, 0, kCausal}, eight, 4);
    prefill.allow_wgmma = wgmma;
    cases.push_back(prefill);
    Case gqa1 = Windowed({300, 900, 4, 4, 64, 600, 0, kCausal, DType::kF16, DType::kF16},
                         {257, 0, 63, 1}, 130);
    gqa1.allow_wgmma = wgmma;
    cases.push_back(gqa1);
    Case ring_step = Windowed({500, 3000, 16, 2, 128, 9000, 5000, kCausal}, {2000, 4500}, 16);
    ring_step.allow_wgmma = wgmma;
    cases.push_back(ring_step);
    Case far_keys = Windowed({200, 1000, 16, 2, 128, 20000, 0, kCausal}, {500, 0}, 0);
    far_keys.allow_wgmma = wgmma;
    cases.push_back(far_keys);
    Case no_mask = Windowed({130, 1000, 8, 2, 128, 400, 0, kNone}, {90, 300}, 2);
    no_mask.allow_wgmma = wgmma;
    cases.push_back(no_mask);
  }
  // Decode (split-KV) and short chunks (the decode tile).
  cases.push_back(Windowed({1, 100000, 32, 8, 128, 99999, 0, kNone}, eight, 4));
  cases.push_back(Windowed({1, 100000, 32, 8, 128, 99999, 0, kCausal}, eight, 0));
  cases.push_back(Windowed({3, 5000, 16, 4, 64, 4997, 0, kCausal, DType::kF16, DType::kF16},
                           {1000, 0, 5, 64}, 70));
  // The CUDA cores.
  cases.push_back(Windowed({130, 300, 4, 2, 80, 170, 0, kCausal, DType::kF32, DType::kF32},
                           {17, 0}, 3));
  cases.push_back(Windowed({20, 300, 8, 2, 128, 400, 0, kNone, DType::kBF16, DType::kF32},
                           {0, 250}, 0));
  return cases;
}
INSTANTIATE_TEST_SUITE_P(Windows, AttentionCudaTest, ::testing::ValuesIn(WindowCases()),
                         CaseName);

// Splitting the keys (any number of splits, including ones that see no key) must give the
// unsplit result up to rounding.
class AttentionCudaSplitTest : public AttentionCudaTest {};

TEST_P(AttentionCudaSplitTest, SplitsEqualWhole) {
  const Case c = GetParam();
  const Inputs in = MakeInputs(c);
  AttentionCudaOptions whole_options;
  whole_options.num_splits = 1;
  const Outputs whole = RunCuda(c, in, whole_options);
  ExpectEveryRowWritten(c, whole);
  ExpectMatchesReference(c, in, whole);
  for (int splits : {0, 2, 3, 7, 64}) {
    SCOPED_TRACE("num_splits " + std::to_string(splits));
    AttentionCudaOptions options;
    options.num_splits = splits;
    const Outputs split = RunCuda(c, in, options);
    ExpectEveryRowWritten(c, split);
    EXPECT_TRUE(MatchesReference(split.o, whole.o, Tolerance::Normalised(kMaxSplitOError)));
    EXPECT_TRUE(
        MatchesReference(split.lse, whole.lse, Tolerance::Elementwise(0.0, kMaxSplitLseError)));
  }
}

Case SplitWindows() {
  return Windowed({1, 100000, 32, 8, 128, 99999, 0, kCausal},
                  {0, 1, 64, 100, 65536, 128, 700, 100000}, 4);
}

Case SplitHeadRows() {
  Case c{1, 100000, 32, 8, 128, 99999, 0, kCausal};
  c.head_rows = {100000, 0, 5, 64, 65, 50000, 99999, 70000};
  return c;
}

INSTANTIATE_TEST_SUITE_P(
    Splits, AttentionCudaSplitTest,
    ::testing::Values(Case{1, 100000, 32, 8, 128, 99999, 0, kCausal},
                      Case{65, 4097, 8, 2, 64, 4032, 0, kCausal},
                      Case{65, 4097, 8, 2, 128, 1000, 0, kCausal, DType::kF16, DType::kF16},
                      Case{300, 9000, 32, 8, 128, 8700, 0, kCausal},
                      Case{1, 1000, 4, 4, 128, 5000, 0, kNone, DType::kF16, DType::kF16},
                      SplitHeadRows(), SplitWindows(),
                      Windowed({300, 9000, 32, 8, 128, 8700, 0, kCausal},
                               {4000, 0, 64, 100, 1, 128, 700, 9000}, 200)),
    CaseName);

TEST(AttentionCudaArgsTest, RejectsBadArguments) {
  // Host memory stands in for device memory: every check happens before anything is launched.
  HostTensor q = RandomTensor(DType::kF32, {3, 6, 64}, 1);
  HostTensor k_bad_heads = RandomTensor(DType::kBF16, {3, 4, 64}, 2);  // 6 q heads over 4
  HostTensor k = RandomTensor(DType::kBF16, {3, 2, 64}, 2);
  HostTensor k_int(DType::kI32, {3, 2, 64});
  HostTensor k_long = RandomTensor(DType::kBF16, {256, 2, 64}, 5);  // 4 key tiles
  HostTensor o = PoisonedF32({3, 6, 64}), lse = PoisonedF32({3, 6});
  auto run = [&](const HostTensor& kk, float scale, const AttentionCudaOptions& options = {}) {
    return AttentionCuda(
        {CView(q), CView(kk), CView(kk), 0, 0, kCausal, scale, o.view(), lse.view()}, options,
        nullptr);
  };
  EXPECT_EQ(run(k_bad_heads, 0.0f).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(run(k_int, 0.0f).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(run(k, -1.0f).code(), StatusCode::kInvalidArgument);
  AttentionCudaOptions small_workspace;
  small_workspace.num_splits = 2;
  small_workspace.workspace = o.view().data;
  small_workspace.workspace_bytes = 16;
  EXPECT_EQ(run(k_long, 0.0f, small_workspace).code(), StatusCode::kInvalidArgument);

  // Windows are carried in the launch for at most kMaxWindowHeads KV heads.
  HostTensor q_many = RandomTensor(DType::kF32, {2, 65, 64}, 6);
  HostTensor k_many = RandomTensor(DType::kBF16, {2, 65, 64}, 7);
  HostTensor o_many = PoisonedF32({2, 65, 64});
  const std::vector<int64_t> windows(65, 8);
  AttentionArgs many{CView(q_many), CView(k_many), CView(k_many), 0, 0, kCausal, 0.0f,
                     o_many.view(), {}};
  many.kv_head_window = windows.data();
  EXPECT_EQ(AttentionCuda(many, nullptr).code(), StatusCode::kUnimplemented);

  HostTensor q_wide = RandomTensor(DType::kF32, {3, 2, 512}, 3);
  HostTensor k_wide = RandomTensor(DType::kBF16, {3, 2, 512}, 4);
  HostTensor o_wide = PoisonedF32({3, 2, 512});
  EXPECT_EQ(
      AttentionCuda(
          {CView(q_wide), CView(k_wide), CView(k_wide), 0, 0, kCausal, 0.0f, o_wide.view(), {}},
          nullptr)
          .code(),
      StatusCode::kUnimplemented);
}

TEST(AttentionCudaArgsTest, WorkspaceOnlyWhenSplit) {
  HostTensor q = RandomTensor(DType::kF32, {1, 8, 128}, 1);
  HostTensor k = RandomTensor(DType::kBF16, {1024, 2, 128}, 2);
  HostTensor o = PoisonedF32({1, 8, 128});
  const AttentionArgs args{CView(q), CView(k), CView(k), 0, 0, kNone, 0.0f, o.view(), {}};
  AttentionCudaOptions options;
  options.num_splits = 1;
  StatusOr<size_t> bytes = AttentionCudaWorkspaceBytes(args, options);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  EXPECT_EQ(*bytes, 0u);
  options.num_splits = 4;  // 16 tiles: 4 splits of 4; o parts, lse parts and the merge's lse
  bytes = AttentionCudaWorkspaceBytes(args, options);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  EXPECT_EQ(*bytes, 4u * 8 * 128 * 4 + 256 + 256);
}

}  // namespace
}  // namespace millipede
