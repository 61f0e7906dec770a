// BatchDecodeAttentionCuda against BatchDecodeAttentionRef on the same 16-bit K/V: batches of
// sequences of different lengths (empty ones, one key, around the 64-key tiles, thousands of
// keys), GQA ratios 1/4/8/16 on the batched tensor-core kernel, a group of 32 and F32 K/V on the
// per-sequence path, batches beyond one launch's table, forced key splits, no LSE, A-shape
// windows, lengths read on the device, entries sharing query rows with per-KV-head row counts
// (a sparse decode token's parts). Outputs start NaN-poisoned between guard bands. Skips
// without a GPU.
#include "kernels/attention/batch_decode_attention_cuda.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/attention/batch_decode_attention.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/op_harness.h"

namespace millipede {
namespace {

using testing::OpCheck;
using testing::PoisonedF32;
using testing::RandomTensor;
using testing::Tolerance;

// As AttentionCuda's tensor-core path (attention_cuda.h): q and P rounded to 16 bits.
constexpr double kMaxOError = 2e-2;    // relative to max |o|
constexpr double kMaxLseError = 2e-2;  // absolute

struct Case {
  std::vector<int64_t> lengths;
  int64_t num_q_heads, num_kv_heads, head_dim;
  DType kv_dtype = DType::kBF16;
  int num_splits = 0;  // AttentionCudaOptions::num_splits
  bool want_lse = true;
  std::vector<int64_t> windows{};  // BatchDecodeAttentionArgs::kv_head_window; empty: none
  int64_t sink = 0;
  // BatchDecodeAttentionArgs::lengths, read on the device (each at most the view's rows, the
  // rows beyond never seen); empty: none.
  std::vector<int64_t> uploaded{};
  // BatchDecodeAttentionArgs::q_rows (q then has max + 1 rows); empty: row b.
  std::vector<int32_t> q_rows{};
  // BatchDecodeAttentionArgs::kv_head_rows, per entry ([num_kv_heads] or empty: every row);
  // empty: none.
  std::vector<std::vector<int32_t>> head_rows{};
  // BatchDecodeAttentionArgs::kv_row_index, per entry: -1 none, else that many keys, each KV
  // head's its own random rows of the entry's (in position order); empty: none.
  std::vector<int64_t> indexed{};
};

// An index of `m` keys over `n` rows of `kv_heads` heads: each head's rows drawn apart, sorted.
HostTensor RandomRowIndex(int64_t m, int64_t n, int64_t kv_heads, uint64_t seed) {
  std::mt19937_64 rng(seed);
  HostTensor t(DType::kI64, {m, kv_heads});
  for (int64_t g = 0; g < kv_heads; ++g) {
    std::vector<int64_t> rows(static_cast<size_t>(m));
    for (int64_t& r : rows) r = static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
    std::sort(rows.begin(), rows.end());
    for (int64_t j = 0; j < m; ++j) t.data<int64_t>()[j * kv_heads + g] = rows[j] * kv_heads + g;
  }
  return t;
}

std::string Name(const Case& c) {
  std::ostringstream name;
  name << "b" << c.lengths.size() << "_h" << c.num_q_heads << "x" << c.num_kv_heads << "_d"
       << c.head_dim << "_" << DTypeName(c.kv_dtype);
  if (c.num_splits > 0) name << "_splits" << c.num_splits;
  if (!c.want_lse) name << "_nolse";
  if (!c.windows.empty()) name << "_sink" << c.sink << "_windows";
  if (!c.uploaded.empty()) name << "_lengths";
  if (!c.q_rows.empty()) name << "_qrows";
  if (!c.head_rows.empty()) name << "_headrows";
  if (!c.indexed.empty()) name << "_indexed";
  return name.str();
}

class BatchDecodeAttentionCudaTest : public testing::GpuOpTest<Case> {};

TEST_P(BatchDecodeAttentionCudaTest, MatchesReference) {
  const Case& c = GetParam();
  const int64_t batch = static_cast<int64_t>(c.lengths.size());
  OpCheck check("batch_decode_attention");
  const int64_t queries =
      c.q_rows.empty() ? batch : *std::max_element(c.q_rows.begin(), c.q_rows.end()) + 1;
  const int q = check.Input(
      RandomTensor(DType::kF32, {queries, c.num_q_heads, c.head_dim}, 1 + batch, -2.0f, 2.0f));
  std::vector<int> ks, vs;
  for (int64_t b = 0; b < batch; ++b) {
    const Shape kv{c.lengths[static_cast<size_t>(b)], c.num_kv_heads, c.head_dim};
    ks.push_back(check.Input(RandomTensor(c.kv_dtype, kv, 1000 + b, -2.0f, 2.0f)));
    vs.push_back(check.Input(RandomTensor(c.kv_dtype, kv, 5000 + b)));
  }
  int uploaded = -1;
  if (!c.uploaded.empty()) {
    HostTensor lengths(DType::kI64, {batch});
    std::copy(c.uploaded.begin(), c.uploaded.end(), lengths.data<int64_t>());
    uploaded = check.Input(lengths);
  }
  std::vector<int> row_index;  // per entry, -1: none
  for (size_t b = 0; b < c.indexed.size(); ++b)
    row_index.push_back(c.indexed[b] < 0 ? -1
                                         : check.Input(RandomRowIndex(c.indexed[b], c.lengths[b],
                                                                      c.num_kv_heads, 77 + b)));
  std::vector<int> head_rows;  // per entry, -1: none
  for (const std::vector<int32_t>& rows : c.head_rows) {
    head_rows.push_back(-1);
    if (rows.empty()) continue;
    HostTensor t(DType::kI32, {c.num_kv_heads});
    std::copy(rows.begin(), rows.end(), t.data<int32_t>());
    head_rows.back() = check.Input(t);
  }
  const int o = check.Output("o", PoisonedF32({batch, c.num_q_heads, c.head_dim}),
                             Tolerance::Normalised(kMaxOError));
  const int lse = c.want_lse ? check.Output("lse", PoisonedF32({batch, c.num_q_heads}),
                                            Tolerance::Elementwise(0, kMaxLseError))
                             : -1;
  std::vector<ConstTensorView> k_views, v_views, row_views, index_views;  // refilled per side
  AttentionCudaOptions options;
  options.num_splits = c.num_splits;
  ASSERT_TRUE(check.Run(
      [&](const OpCheck::Tensors& t) {
        k_views.clear();
        v_views.clear();
        for (int64_t b = 0; b < batch; ++b) {
          k_views.push_back(t.cview(ks[static_cast<size_t>(b)]));
          v_views.push_back(t.cview(vs[static_cast<size_t>(b)]));
        }
        BatchDecodeAttentionArgs a{t.cview(q), k_views, v_views, 0.0f, t.view(o),
                                   lse >= 0 ? t.view(lse) : TensorView{}};
        if (!c.windows.empty()) {
          a.kv_head_window = c.windows.data();
          a.sink_tokens = c.sink;
        }
        if (uploaded >= 0) a.lengths = t.cview(uploaded);
        a.q_rows = c.q_rows;
        row_views.clear();
        for (int i : head_rows) row_views.push_back(i < 0 ? ConstTensorView{} : t.cview(i));
        a.kv_head_rows = row_views;
        index_views.clear();
        for (int i : row_index) index_views.push_back(i < 0 ? ConstTensorView{} : t.cview(i));
        a.kv_row_index = index_views;
        return a;
      },
      BatchDecodeAttentionRef,
      [&](const BatchDecodeAttentionArgs& a, cudaStream_t stream) {
        return BatchDecodeAttentionCuda(a, options, stream);
      }));
}

std::vector<int64_t> RandomLengths(int n, int64_t max, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> out;
  for (int i = 0; i < n; ++i) out.push_back(static_cast<int64_t>(rng() % (max + 1)));
  return out;
}

// clang-format off
INSTANTIATE_TEST_SUITE_P(
    Batches, BatchDecodeAttentionCudaTest,
    ::testing::Values(
        Case{{100}, 32, 8, 128},
        Case{{0, 1, 4097, 63, 64, 65}, 32, 8, 128},
        Case{RandomLengths(32, 5000, 1), 32, 8, 128},
        Case{RandomLengths(32, 5000, 2), 32, 8, 128, DType::kBF16, 3},
        Case{{63, 64, 65, 1000, 3}, 8, 8, 64, DType::kF16},
        Case{{700, 2, 129}, 16, 4, 64, DType::kBF16, 0, false},
        Case{{300, 20000, 1}, 32, 2, 128},
        Case{RandomLengths(130, 300, 3), 32, 8, 128},
        Case{{0, 0}, 32, 8, 128},
        // Outside the batched kernel: a GQA group of 32 and F32 K/V run per sequence.
        Case{{40, 3000, 0}, 32, 1, 128},
        Case{{40, 300, 0}, 8, 2, 64, DType::kF32},
        // A-shape (DuoAttention streaming) heads beside full ones: windows inside and across
        // tiles and longer than a sequence, sinks of 0 and 4; split, unsplit and per sequence.
        Case{{0, 1, 4097, 63, 64, 65, 20000, 300}, 32, 8, 128, DType::kBF16, 0, true,
             {0, 1, 64, 100, 0, 128, 700, 100000}, 4},
        Case{RandomLengths(40, 9000, 4), 32, 8, 128, DType::kBF16, 7, true,
             {256, 0, 256, 0, 256, 0, 256, 0}, 64},
        Case{{700, 2, 129}, 16, 4, 64, DType::kF16, 1, false, {0, 70, 3, 1000}, 0},
        Case{{0, 1, 4097, 63, 64, 65, 20000, 300}, 32, 8, 128, DType::kF8E4M3, 0, true,
             {0, 1, 64, 100, 0, 128, 700, 100000}, 4},
        Case{{40, 300, 0}, 8, 2, 64, DType::kF32, 0, true, {0, 17}, 3},
        // Lengths read on the device: views longer than them, windows at the uploaded length,
        // split and unsplit.
        Case{{4096, 300, 20000, 64, 1}, 32, 8, 128, DType::kBF16, 0, true, {}, 0,
             {4000, 0, 12345, 64, 1}},
        Case{{4096, 300, 20000, 64, 1}, 32, 8, 128, DType::kBF16, 1, true, {}, 0,
             {4000, 0, 12345, 64, 1}},
        Case{{4096, 300, 20000, 64, 1}, 32, 8, 128, DType::kBF16, 5, true,
             {0, 100, 0, 700, 0, 64, 0, 5000}, 4, {4000, 0, 12345, 64, 1}},
        Case{{4096, 300, 20000, 64, 1}, 32, 8, 128, DType::kBF16, 0, true,
             {0, 100, 0, 700, 0, 64, 0, 5000}, 4, {4000, 0, 12345, 64, 1}},
        // A sparse decode token's parts: entries sharing query rows (part-major, as the engine
        // lays them out), per-KV-head row counts (0, inside and past a tile, past the rows) on
        // some; split, unsplit, per sequence (F32) and beyond one launch's table.
        Case{{2048, 5000, 70, 0, 1, 300}, 32, 8, 128, DType::kBF16, 0, true, {}, 0, {},
             {0, 1, 2, 0, 1, 2},
             {{2048, 0, 64, 65, 2000, 1, 3000, 7}, {}, {70, 70, 70, 70, 70, 70, 70, 70}, {}, {},
              {}}},
        Case{{2048, 5000, 70, 0, 1, 300}, 32, 8, 128, DType::kBF16, 4, true, {}, 0, {},
             {0, 1, 2, 0, 1, 2},
             {{2048, 0, 64, 65, 2000, 1, 3000, 7}, {}, {9, 70, 1, 70, 0, 70, 33, 70}, {}, {},
              {}}},
        Case{{700, 2, 129, 50}, 16, 4, 64, DType::kF16, 1, false, {}, 0, {}, {1, 1, 0, 0},
             {{700, 3, 0, 64}, {}, {}, {1, 2, 3, 100}}},
        Case{{40, 300, 0}, 8, 2, 64, DType::kF32, 0, true, {}, 0, {}, {2, 0, 0},
             {{5, 40}, {299, 0}, {1, 1}}},
        Case{RandomLengths(160, 300, 5), 32, 8, 128, DType::kBF16, 0, true, {}, 0, {},
             std::vector<int32_t>(160, 3), {}},
        // OmniKV's chosen rows read through an index (the rows of a long context, a head's own
        // count beside), beside plain entries; split and unsplit.
        Case{{5000, 300, 70000, 1, 64}, 32, 8, 128, DType::kBF16, 0, true, {}, 0, {},
             {0, 1, 2, 3, 4},
             {{2048, 2048, 2000, 0, 1, 2048, 64, 65}, {}, {}, {}, {}},
             {2048, -1, 2048, -1, 64}},
        Case{{5000, 300, 70000, 1, 64}, 32, 8, 128, DType::kBF16, 3, true, {}, 0, {}, {}, {},
             {2048, -1, 1000, -1, 7}},
        Case{{5000, 300, 70000, 1, 64}, 32, 8, 128, DType::kF8E4M3, 0, true, {}, 0, {},
             {0, 1, 2, 3, 4},
             {{2048, 2048, 2000, 0, 1, 2048, 64, 65}, {}, {}, {}, {}},
             {2048, -1, 2048, -1, 64}},
        Case{{700, 2, 129}, 16, 4, 64, DType::kF16, 0, false, {}, 0, {}, {2, 1, 0}, {},
             {100, -1, 129}}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return Name(info.param) + "_" + std::to_string(info.index);
    });
// clang-format on

}  // namespace
}  // namespace millipede
