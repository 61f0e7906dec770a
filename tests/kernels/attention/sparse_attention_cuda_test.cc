// SparseAttentionCuda against SparseAttentionRef (same 16-bit K/V values) on the op harness:
// random vertical-slash-like indexes (bands, far single-diagonal bands, sinks, columns, keys
// after the queries) with GQA 1/4/8, head dims 64/128 on the Hopper kernel and 16/80/128 (F32)
// on the CUDA cores, F16/BF16, split key layouts, partial and one-row tiles, long items of
// thousands of keys through the stage ring, indexes covering every key (dense causal), A-shape
// as static ranges, empty items, columns only, keys only in the future, rows in no tile, the
// CUDA-core path forced and by misalignment. Outputs start NaN-poisoned between guard bands.
// Skips without a GPU.
#include "kernels/attention/sparse_attention_cuda.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/attention/sparse_attention.h"
#include "tests/kernels/attention/sparse_test_util.h"
#include "tests/kernels/op_harness.h"

namespace millipede {
namespace {

using testing::BuildSparseCase;
using testing::OpCheck;
using testing::PoisonedF32;
using testing::RandomSparseItem;
using testing::RandomTensor;
using testing::SparseCase;
using testing::SparseItem;
using testing::SparseLayout;
using testing::SparseRow3;
using testing::SparseTilesOf;
using testing::Tolerance;

// The tensor-core path rounds q and the probabilities to 16 bits (sparse_attention_cuda.h), as
// the dense kernel does and with its bounds; the fp32 CUDA-core path is held far tighter.
constexpr double kMaxOError = 2e-2;    // max |o - o_ref| / max |o_ref|
constexpr double kMaxLseError = 2e-2;  // max |lse - lse_ref|
constexpr double kMaxFp32Error = 1e-4;

enum class Index {
  kRandom,    // RandomSparseItem per item
  kCovering,  // one range over every key up to the tile's end: dense causal attention
  kAShape,    // per 64-position tile: sinks [0, 64) and the window's blocks before it
  kFixed,     // empty items, future-only keys, columns only (the first items), then random
};

struct Case {
  int64_t n_q, q_offset, num_q_heads, num_kv_heads, head_dim;
  DType kv_dtype = DType::kBF16;
  Index index = Index::kRandom;
  int64_t scale_keys = 1;  // RandomSparseItem's scale
  bool split_layout = false;
  int64_t tile_rows = kSparseTileRows;
  bool allow_wgmma = true;
  size_t q_offset_bytes = 0;  // moves q off 16-byte alignment
  float scale = 0.0f;
  bool skip_rows = false;  // leave every third tile out
};

std::string Name(const Case& c) {
  static const char* const kIndexNames[] = {"random", "covering", "ashape", "fixed"};
  std::ostringstream name;
  name << "q" << c.n_q << "_at" << c.q_offset << "_h" << c.num_q_heads << "x" << c.num_kv_heads
       << "_d" << c.head_dim << "_" << DTypeName(c.kv_dtype) << "_"
       << kIndexNames[static_cast<int>(c.index)];
  if (c.scale_keys > 1) name << "_x" << c.scale_keys;
  if (c.split_layout) name << "_split";
  if (c.tile_rows != kSparseTileRows) name << "_tiles" << c.tile_rows;
  if (!c.allow_wgmma) name << "_cudacores";
  if (c.q_offset_bytes != 0) name << "_misaligned";
  if (c.scale != 0.0f) name << "_scaled";
  if (c.skip_rows) name << "_gaps";
  return name.str();
}

std::vector<SparseItem> MakeItems(const Case& c, const std::vector<SparseRow3>& tiles,
                                  int64_t n_pos) {
  std::mt19937_64 rng(static_cast<uint64_t>(c.n_q * 7919 + c.q_offset + c.num_q_heads));
  std::vector<SparseItem> items;
  if (c.index == Index::kFixed) {
    // Item 2's columns include two inside its tile's positions and one after them.
    const int64_t first = tiles[2 % tiles.size()][2];
    items = {{}, {{{n_pos - 8, n_pos}}, {}}, {{}, {0, 3, first + 1, first + 30, n_pos - 1}}};
  }
  while (static_cast<int64_t>(items.size()) < c.num_kv_heads * static_cast<int64_t>(tiles.size())) {
    const SparseRow3& t = tiles[items.size() % tiles.size()];
    const int64_t last = t[2] + t[1] - t[0] - 1;
    if (c.index == Index::kCovering) {
      items.push_back({{{0, last + 1}}, {}});
    } else if (c.index == Index::kAShape) {
      const int64_t block = t[2] / kSparseTileRows * kSparseTileRows;
      const int64_t window_begin = std::max<int64_t>(kSparseTileRows, block - 4 * kSparseTileRows);
      SparseItem item{{{0, std::min<int64_t>(kSparseTileRows, last + 1)}}, {}};
      if (window_begin <= last) item.ranges.push_back({window_begin, last + 1});
      items.push_back(item);
    } else {
      items.push_back(RandomSparseItem(rng, last, n_pos, c.scale_keys));
    }
  }
  return items;
}

class SparseAttentionCudaTest : public testing::GpuOpTest<Case> {};

TEST_P(SparseAttentionCudaTest, MatchesReference) {
  const Case c = GetParam();
  // Positions after the last query too (the causal mask must hide them).
  const int64_t n_pos = c.q_offset + c.n_q + 40;
  const SparseLayout layout =
      c.split_layout ? SparseLayout{{{0, n_pos / 3, n_pos - n_pos / 3 + 9}, {n_pos / 3, n_pos, 0}}}
                     : SparseLayout::Identity(n_pos);
  const int64_t n_kv = layout.Rows(), hq = c.num_q_heads, hk = c.num_kv_heads, d = c.head_dim;
  std::vector<SparseRow3> tiles = SparseTilesOf(c.n_q, c.q_offset, c.tile_rows);
  if (c.skip_rows) {
    std::vector<SparseRow3> kept;
    for (size_t i = 0; i < tiles.size(); ++i)
      if (i % 3 != 1) kept.push_back(tiles[i]);
    tiles = kept;
  }
  const SparseCase sc = BuildSparseCase(tiles, MakeItems(c, tiles, n_pos), layout);

  OpCheck check("sparse_attention " + Name(c));
  const int q = check.Input(RandomTensor(DType::kF32, {c.n_q, hq, d}, 11, -2, 2), c.q_offset_bytes);
  const int k = check.Input(RandomTensor(c.kv_dtype, {n_kv, hk, d}, 12, -2, 2));
  const int v = check.Input(RandomTensor(c.kv_dtype, {n_kv, hk, d}, 13));
  const int tile_tensor = check.Input(sc.tiles);
  const int range_offsets = check.Input(sc.range_offsets), ranges = check.Input(sc.ranges);
  const int column_offsets = check.Input(sc.column_offsets), columns = check.Input(sc.columns);
  const bool tensor_cores =
      c.allow_wgmma && c.kv_dtype != DType::kF32 && (d == 64 || d == 128) && c.q_offset_bytes == 0;
  const double o_error = tensor_cores ? kMaxOError : kMaxFp32Error;
  const double lse_error = tensor_cores ? kMaxLseError : kMaxFp32Error;
  // Rows in no tile stay NaN on both sides.
  const int o = check.Output("o", PoisonedF32({c.n_q, hq, d}),
                             Tolerance::Normalised(o_error).WithNanMatchingNan());
  const int lse = check.Output("lse", PoisonedF32({c.n_q, hq}),
                               Tolerance::Elementwise(0.0, lse_error).WithNanMatchingNan());
  SparseAttentionCudaOptions options;
  options.allow_wgmma = c.allow_wgmma;
  check.Run(
      [&](const OpCheck::Tensors& t) {
        return SparseAttentionArgs{
            t.cview(q),
            t.cview(k),
            t.cview(v),
            t.cview(tile_tensor),
            {t.cview(range_offsets), t.cview(ranges), t.cview(column_offsets), t.cview(columns)},
            c.scale,
            t.view(o),
            t.view(lse)};
      },
      SparseAttentionRef,
      [&](const SparseAttentionArgs& args, cudaStream_t stream) {
        return SparseAttentionCuda(args, options, stream);
      });
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) { return Name(info.param); }

// GQA 1/4/8 at both tensor-core head dims and types, on 130 queries after 300 positions (a
// partial first and last tile), in one buffer and in a split layout.
std::vector<Case> TensorCoreCases() {
  std::vector<Case> cases;
  for (int64_t group : {1, 4, 8})
    for (int64_t d : {64, 128})
      for (DType dtype : {DType::kBF16, DType::kF16, DType::kF8E4M3})
        for (bool split : {false, true}) {
          Case c{130, 300, 2 * group, 2, d, dtype};
          c.split_layout = split;
          cases.push_back(c);
        }
  return cases;
}
INSTANTIATE_TEST_SUITE_P(TensorCores, SparseAttentionCudaTest,
                         ::testing::ValuesIn(TensorCoreCases()), CaseName);

// The CUDA-core path: other head dims, F32 K/V, forced, and q off 16-byte alignment.
std::vector<Case> CudaCoreCases() {
  std::vector<Case> cases;
  for (int64_t d : {16, 80})
    for (DType dtype : {DType::kBF16, DType::kF32}) cases.push_back({130, 300, 8, 2, d, dtype});
  cases.push_back({130, 300, 8, 2, 128, DType::kF32});
  Case forced{130, 300, 8, 2, 128, DType::kBF16};
  forced.allow_wgmma = false;
  cases.push_back(forced);
  Case misaligned{130, 300, 8, 2, 128, DType::kBF16};
  misaligned.q_offset_bytes = 4;
  cases.push_back(misaligned);
  return cases;
}
INSTANTIATE_TEST_SUITE_P(CudaCores, SparseAttentionCudaTest, ::testing::ValuesIn(CudaCoreCases()),
                         CaseName);

// Index shapes: covering every key, A-shape blocks, fixed empty / future-only / columns-only
// items, tiles of 7 rows and of one row, tiles left out, an explicit scale; long items of
// thousands of keys (hundreds of far bands, ~2000 columns) through many turns of the stage ring.
std::vector<Case> IndexCases() {
  std::vector<Case> cases;
  for (Index index : {Index::kCovering, Index::kAShape, Index::kFixed})
    for (int64_t d : {64, 128}) {
      Case c{200, 800, 16, 4, d, DType::kBF16, index};
      cases.push_back(c);
      c.allow_wgmma = false;
      cases.push_back(c);
    }
  Case partial{100, 250, 8, 2, 128, DType::kF16};
  partial.tile_rows = 7;
  cases.push_back(partial);
  partial.tile_rows = 1;
  partial.n_q = 20;
  cases.push_back(partial);
  Case gaps{300, 100, 8, 2, 128};
  gaps.skip_rows = true;
  gaps.scale = 0.3f;
  cases.push_back(gaps);
  Case long_items{128, 12000, 8, 2, 128};
  long_items.scale_keys = 80;
  cases.push_back(long_items);
  long_items.kv_dtype = DType::kF16;
  long_items.num_q_heads = 8;
  long_items.num_kv_heads = 1;
  long_items.head_dim = 64;
  long_items.split_layout = true;
  cases.push_back(long_items);
  return cases;
}
INSTANTIATE_TEST_SUITE_P(Indexes, SparseAttentionCudaTest, ::testing::ValuesIn(IndexCases()),
                         CaseName);

// Shapes and dtypes are refused on the host before anything runs; head_dim above 256 is
// unsupported.
TEST(SparseAttentionCudaArgsTest, RefusesBadArguments) {
  const HostTensor q = RandomTensor(DType::kF32, {4, 2, 8}, 1);
  const HostTensor k = RandomTensor(DType::kBF16, {4, 1, 8}, 2);
  const HostTensor v = RandomTensor(DType::kF16, {4, 1, 8}, 3);
  HostTensor o = PoisonedF32({4, 2, 8}), lse = PoisonedF32({4, 2});
  const SparseCase sc = BuildSparseCase({{0, 4, 0}}, {{{{0, 4}}, {}}}, SparseLayout::Identity(4));
  SparseAttentionArgs args{testing::CView(q), testing::CView(k),
                           testing::CView(v), testing::CView(sc.tiles),
                           sc.index(),        0.0f,
                           o.view(),          lse.view()};
  EXPECT_EQ(SparseAttentionCuda(args, nullptr).code(), StatusCode::kInvalidArgument);
  const HostTensor q_big = RandomTensor(DType::kF32, {4, 2, 264}, 4);
  const HostTensor k_big = RandomTensor(DType::kBF16, {4, 1, 264}, 5);
  HostTensor o_big = PoisonedF32({4, 2, 264});
  args = {testing::CView(q_big),
          testing::CView(k_big),
          testing::CView(k_big),
          testing::CView(sc.tiles),
          sc.index(),
          0.0f,
          o_big.view(),
          lse.view()};
  EXPECT_EQ(SparseAttentionCuda(args, nullptr).code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace millipede
