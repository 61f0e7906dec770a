// VerticalSlashIndexCuda against VerticalSlashIndexRef: the count pass's offsets and the fill
// pass's offsets, ranges and columns equal entry for entry, on random cases (partial tiles,
// layouts of several runs in shuffled row order, gaps with skip_absent, diagonals dense near 0
// and scattered, heads selecting nothing, up to 1024 tiles x 8 KV heads); outputs start
// poisoned inside guard bands. Broken inputs are InvalidArgument errors as on the CPU. A fill
// pass that reuses its count pass's counts (inputs_unchanged_since_count) gives the same index as
// one that recomputes them, and a changed argument or another call between the passes is not
// reused. Skips without a GPU.
#include "kernels/sparse_index/vertical_slash_index_cuda.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "kernels/sparse_index/vertical_slash_index.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/op_harness.h"
#include "tests/kernels/sparse_index/sparse_index_cuda_test_util.h"
#include "tests/kernels/sparse_index/sparse_index_test_util.h"

namespace millipede {
namespace {

using testing::CountThenFillOnDevice;
using testing::DeviceTensor;
using testing::ExpectSameIndex;
using testing::HaveGpu;
using testing::HostIndex;
using testing::I64Tensor;
using testing::OpCheck;
using testing::Rows3;
using testing::Tolerance;

struct Case {
  int64_t n_pos, kv_heads, n_vertical, n_slash, cuts;
  bool gaps;  // some runs left out, built with skip_absent
  uint64_t seed;
};

struct Inputs {
  HostTensor tiles, runs, columns, diagonals;
};

// n sorted distinct values below `limit` (or fewer), padded with -1 to `slots`.
std::vector<int64_t> Selection(std::mt19937_64& rng, int64_t slots, int64_t limit, bool near_zero) {
  std::vector<int64_t> picked;
  const int64_t used = std::min<int64_t>(slots, static_cast<int64_t>(rng() % (slots + 1)));
  if (near_zero) {  // MInference's slashes crowd the main diagonal
    for (int64_t d = 0; d < std::min<int64_t>(used / 2, limit); ++d) picked.push_back(d);
  }
  while (static_cast<int64_t>(picked.size()) < std::min(used, limit)) {
    const int64_t v = static_cast<int64_t>(rng() % limit);
    if (std::find(picked.begin(), picked.end(), v) == picked.end()) picked.push_back(v);
  }
  std::sort(picked.begin(), picked.end());
  picked.resize(slots, -1);
  return picked;
}

Inputs MakeInputs(const Case& c) {
  std::mt19937_64 rng(c.seed);
  std::vector<int64_t> tiles;
  int64_t row = 0;
  for (int64_t a = 0; a < c.n_pos; a += kSparseTileRows) {
    int64_t begin = a, end = std::min(c.n_pos, a + kSparseTileRows);
    if (rng() % 4 == 0) begin += static_cast<int64_t>(rng() % (end - begin));
    tiles.insert(tiles.end(), {row, row + end - begin, begin});
    row += end - begin;
  }
  std::vector<int64_t> cuts{0, c.n_pos};
  for (int64_t i = 0; i < c.cuts; ++i) cuts.push_back(static_cast<int64_t>(rng() % c.n_pos));
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<size_t> order(cuts.size() - 1);
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<int64_t> row_of_run(order.size());
  int64_t next_row = 3;
  for (size_t i : order) {
    row_of_run[i] = next_row;
    next_row += cuts[i + 1] - cuts[i];
  }
  std::vector<int64_t> runs;
  for (size_t i = 0; i + 1 < cuts.size(); ++i)
    if (!c.gaps || rng() % 3 != 0) runs.insert(runs.end(), {cuts[i], cuts[i + 1], row_of_run[i]});
  std::vector<int64_t> columns, diagonals;
  for (int64_t g = 0; g < c.kv_heads; ++g) {
    const bool nothing = c.kv_heads > 1 && g == c.kv_heads - 1;
    std::vector<int64_t> cols = Selection(rng, c.n_vertical, c.n_pos, false);
    std::vector<int64_t> diag = Selection(rng, c.n_slash, c.n_pos + 100, g % 2 == 0);
    if (nothing) std::fill(cols.begin(), cols.end(), -1), std::fill(diag.begin(), diag.end(), -1);
    columns.insert(columns.end(), cols.begin(), cols.end());
    diagonals.insert(diagonals.end(), diag.begin(), diag.end());
  }
  return {Rows3(tiles), runs.empty() ? I64Tensor({0, 3}, {}) : Rows3(runs),
          I64Tensor({c.kv_heads, c.n_vertical}, columns),
          I64Tensor({c.kv_heads, c.n_slash}, diagonals)};
}

HostTensor PoisonedI64(const Shape& shape) {
  HostTensor t(DType::kI64, shape);
  std::memset(t.view().data, 0x7b, t.NumBytes());
  return t;
}

class VerticalSlashIndexCudaTest : public testing::GpuOpTest<Case> {};

TEST_P(VerticalSlashIndexCudaTest, MatchesReference) {
  const Case c = GetParam();
  Inputs in = MakeInputs(c);
  auto workspace = SparseIndexCudaWorkspace::Create();
  ASSERT_TRUE(workspace.ok());
  auto cuda = [&](const VerticalSlashIndexArgs& args, cudaStream_t stream) {
    return VerticalSlashIndexCuda(args, **workspace, stream);
  };
  const int64_t items = c.kv_heads * in.tiles.shape()[0];
  // Count pass: the offsets only.
  OpCheck count("vertical_slash_index count");
  const int tiles = count.Input(in.tiles), runs = count.Input(in.runs, 8);
  const int columns = count.Input(in.columns), diagonals = count.Input(in.diagonals);
  const int range_offsets =
      count.Output("range_offsets", PoisonedI64({items + 1}), Tolerance::Bitwise());
  const int column_offsets =
      count.Output("column_offsets", PoisonedI64({items + 1}), Tolerance::Bitwise());
  auto make = [&](const OpCheck::Tensors& t, TensorView ranges, TensorView cols) {
    VerticalSlashIndexArgs args;
    args.tiles = t.cview(tiles);
    args.runs = t.cview(runs);
    args.columns = t.cview(columns);
    args.diagonals = t.cview(diagonals);
    args.skip_absent = c.gaps;
    args.out = {t.view(range_offsets), ranges, t.view(column_offsets), cols};
    return args;
  };
  ASSERT_TRUE(count.Run(
      [&](const OpCheck::Tensors& t) {
        return make(t, {nullptr, DType::kI64, {0, 3}}, {nullptr, DType::kI64, {0, 2}});
      },
      VerticalSlashIndexRef, cuda));
  const int64_t n_ranges = count.expected(range_offsets).data<int64_t>()[items];
  const int64_t n_columns = count.expected(column_offsets).data<int64_t>()[items];
  RecordProperty("ranges", std::to_string(n_ranges));
  RecordProperty("columns", std::to_string(n_columns));

  // Fill pass into fresh poisoned offsets, ranges and columns.
  OpCheck fill("vertical_slash_index fill");
  ASSERT_EQ(fill.Input(in.tiles), tiles);
  ASSERT_EQ(fill.Input(in.runs, 8), runs);
  ASSERT_EQ(fill.Input(in.columns), columns);
  ASSERT_EQ(fill.Input(in.diagonals), diagonals);
  ASSERT_EQ(fill.Output("range_offsets", PoisonedI64({items + 1}), Tolerance::Bitwise()),
            range_offsets);
  ASSERT_EQ(fill.Output("column_offsets", PoisonedI64({items + 1}), Tolerance::Bitwise()),
            column_offsets);
  const int ranges = fill.Output("ranges", PoisonedI64({n_ranges, 3}), Tolerance::Bitwise());
  const int cols = fill.Output("columns", PoisonedI64({n_columns, 2}), Tolerance::Bitwise());
  ASSERT_TRUE(
      fill.Run([&](const OpCheck::Tensors& t) { return make(t, t.view(ranges), t.view(cols)); },
               VerticalSlashIndexRef, cuda));
}

// The reference's index of `in` with the diagonals `diagonals`.
HostIndex ReferenceIndex(const Case& c, const Inputs& in, const HostTensor& diagonals) {
  VerticalSlashIndexArgs args;
  args.tiles = testing::CView(in.tiles);
  args.runs = testing::CView(in.runs);
  args.columns = testing::CView(in.columns);
  args.diagonals = testing::CView(diagonals);
  args.skip_absent = c.gaps;
  auto index = testing::BuildIndex(args, c.kv_heads * in.tiles.shape()[0], VerticalSlashIndexRef);
  EXPECT_TRUE(index.ok()) << index.status().ToString();
  return index.ok() ? *index : HostIndex{};
}

TEST_P(VerticalSlashIndexCudaTest, FillReusesCountPassOnlyOnExactMatch) {
  const Case c = GetParam();
  const Inputs in = MakeInputs(c);
  auto workspace = SparseIndexCudaWorkspace::Create();
  ASSERT_TRUE(workspace.ok());
  auto build = [&](const VerticalSlashIndexArgs& args) {
    return VerticalSlashIndexCuda(args, **workspace, nullptr);
  };
  DeviceTensor tiles(in.tiles), runs(in.runs), columns(in.columns), diagonals(in.diagonals);
  // Other diagonals at another address: every head's slashes shifted by one.
  HostTensor shifted = testing::CopyOf(in.diagonals);
  for (int64_t i = 0; i < shifted.NumElements(); ++i)
    if (shifted.data<int64_t>()[i] >= 0) ++shifted.data<int64_t>()[i];
  DeviceTensor other_diagonals(shifted);
  VerticalSlashIndexArgs args;
  args.tiles = tiles.cview();
  args.runs = runs.cview();
  args.columns = columns.cview();
  args.diagonals = diagonals.cview();
  args.skip_absent = c.gaps;
  VerticalSlashIndexArgs other_args = args;
  other_args.diagonals = other_diagonals.cview();
  const int64_t items = c.kv_heads * in.tiles.shape()[0];
  auto count_then_fill = [&](const VerticalSlashIndexArgs& count_args,
                             const VerticalSlashIndexArgs& fill_args, const HostIndex& expected,
                             bool unchanged, const std::function<Status()>& between = {}) {
    auto got = CountThenFillOnDevice(count_args, fill_args, items,
                                     static_cast<int64_t>(expected.ranges.size()),
                                     static_cast<int64_t>(expected.columns.size()), unchanged,
                                     build, between);
    EXPECT_TRUE(got.ok()) << got.status().ToString();
    return got.ok() ? *got : HostIndex{};
  };
  const HostIndex expected = ReferenceIndex(c, in, in.diagonals);
  const HostIndex reused = count_then_fill(args, args, expected, true);
  ExpectSameIndex(reused, count_then_fill(args, args, expected, false), "reused vs recomputed");
  ExpectSameIndex(reused, expected, "reused vs reference");

  const HostIndex expected_other = ReferenceIndex(c, in, shifted);
  ExpectSameIndex(count_then_fill(args, other_args, expected_other, true), expected_other,
                  "diagonals changed between the passes");

  // Another call on the workspace between the passes (a count pass over the other diagonals,
  // which overwrites the per-head counts): the fill pass must not take them.
  DeviceTensor between_ranges(testing::PoisonedIndexTensor({items + 1}));
  DeviceTensor between_columns(testing::PoisonedIndexTensor({items + 1}));
  VerticalSlashIndexArgs between_args = other_args;
  between_args.out = {between_ranges.view(), {nullptr, DType::kI64, {0, 3}},
                      between_columns.view(), {nullptr, DType::kI64, {0, 2}}};
  ExpectSameIndex(count_then_fill(args, args, expected, true, [&] { return build(between_args); }),
                  expected, "another call between the passes");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, VerticalSlashIndexCudaTest,
    ::testing::Values(Case{64, 1, 4, 2, 0, false, 1}, Case{1, 1, 1, 1, 0, false, 2},
                      Case{777, 2, 30, 17, 3, false, 3}, Case{1000, 4, 50, 40, 6, true, 4},
                      Case{5000, 8, 200, 120, 1, false, 5}, Case{4100, 3, 1, 500, 12, true, 6},
                      Case{65536, 8, 1000, 400, 0, false, 7},
                      Case{20000, 8, 64, 1000, 40, false, 8}, Case{300, 2, 0, 0, 2, false, 9},
                      Case{3000, 5, 100, 0, 4, true, 10}));

TEST(VerticalSlashIndexCudaErrorsTest, BrokenInputsAreInvalidArgument) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  auto workspace = SparseIndexCudaWorkspace::Create();
  ASSERT_TRUE(workspace.ok());
  struct Bad {
    std::vector<int64_t> tiles, runs, columns, diagonals;
  };
  // Absent key under a band; absent column; columns out of order; a selection after -1;
  // a tile crossing a multiple of 64; runs out of order.
  for (const Bad& bad :
       std::vector<Bad>{{{0, 64, 128}, {0, 100, 0, 110, 400, 100}, {-1}, {0, 10, 70}},
                        {{0, 64, 128}, {0, 100, 0, 110, 400, 100}, {105}, {0}},
                        {{0, 64, 128}, {0, 400, 0}, {7, 5}, {0}},
                        {{0, 64, 128}, {0, 400, 0}, {-1}, {-1, 3}},
                        {{0, 16, 120}, {0, 400, 0}, {-1}, {0}},
                        {{0, 64, 128}, {100, 400, 0, 0, 100, 300}, {-1}, {0}}}) {
    HostTensor tiles = Rows3(bad.tiles), runs = Rows3(bad.runs);
    HostTensor columns = I64Tensor({1, static_cast<int64_t>(bad.columns.size())}, bad.columns);
    HostTensor diagonals =
        I64Tensor({1, static_cast<int64_t>(bad.diagonals.size())}, bad.diagonals);
    HostTensor offsets(DType::kI64, {2});
    DeviceTensor d_tiles(tiles), d_runs(runs), d_columns(columns), d_diagonals(diagonals);
    DeviceTensor d_range_offsets(offsets), d_column_offsets(offsets);
    VerticalSlashIndexArgs args;
    args.tiles = d_tiles.cview();
    args.runs = d_runs.cview();
    args.columns = d_columns.cview();
    args.diagonals = d_diagonals.cview();
    args.out = {d_range_offsets.view(),
                {nullptr, DType::kI64, {0, 3}},
                d_column_offsets.view(),
                {nullptr, DType::kI64, {0, 2}}};
    const Status want = VerticalSlashIndexRef([&] {
      VerticalSlashIndexArgs host = args;
      host.tiles = testing::CView(tiles);
      host.runs = testing::CView(runs);
      host.columns = testing::CView(columns);
      host.diagonals = testing::CView(diagonals);
      host.out.range_offsets = offsets.view();
      host.out.column_offsets = offsets.view();
      return host;
    }());
    EXPECT_EQ(want.code(), StatusCode::kInvalidArgument);
    const Status got = VerticalSlashIndexCuda(args, **workspace, nullptr);
    EXPECT_EQ(got.code(), StatusCode::kInvalidArgument) << got.ToString();
  }
  // The workspace still serves a good call afterwards.
  HostTensor tiles = Rows3({0, 64, 128}), runs = Rows3({0, 400, 0});
  HostTensor columns = I64Tensor({1, 1}, {5}), diagonals = I64Tensor({1, 1}, {0});
  HostTensor offsets(DType::kI64, {2});
  DeviceTensor d_tiles(tiles), d_runs(runs), d_columns(columns), d_diagonals(diagonals);
  DeviceTensor d_range_offsets(offsets), d_column_offsets(offsets);
  VerticalSlashIndexArgs args;
  args.tiles = d_tiles.cview();
  args.runs = d_runs.cview();
  args.columns = d_columns.cview();
  args.diagonals = d_diagonals.cview();
  args.out = {d_range_offsets.view(),
              {nullptr, DType::kI64, {0, 3}},
              d_column_offsets.view(),
              {nullptr, DType::kI64, {0, 2}}};
  EXPECT_TRUE(VerticalSlashIndexCuda(args, **workspace, nullptr).ok());
  EXPECT_EQ(testing::ToVector(d_range_offsets.Read()), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(testing::ToVector(d_column_offsets.Read()), (std::vector<int64_t>{0, 1}));
}

}  // namespace
}  // namespace millipede
