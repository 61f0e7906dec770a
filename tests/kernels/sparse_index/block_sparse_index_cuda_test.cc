// BlockSparseIndexCuda against BlockSparseIndexRef, entry for entry. The sums are small integers
// and the counts powers of two, so every score is exact in fp32 and in double and the kernel must
// make the reference's choices, ties included (many, with values in {-1, 0, 1}). Cases: GQA
// groups 1/4/8, per-head budgets from 0 to beyond the blocks, empty and partial key blocks,
// blocks of 32/64/128 positions, partial tiles, layouts of several runs and gaps (skip_absent),
// several score slabs, keys beyond shared memory; outputs poisoned inside guard bands. Broken
// inputs are InvalidArgument errors as on the CPU. A fill pass that reuses its count pass's
// selection (inputs_unchanged_since_count) gives the same index as one that recomputes it, and a
// changed argument or another call between the passes is not reused. Skips without a GPU.
#include "kernels/sparse_index/block_sparse_index_cuda.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "kernels/sparse_index/block_sparse_index.h"
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
using testing::OpCheck;
using testing::Rows3;
using testing::Tolerance;

struct Case {
  int64_t num_blocks, heads, head_dim, group, block, range;
  int64_t tile_every;  // a tile for every tile_every-th query block (from the last one back)
  int64_t cuts;
  bool gaps;
  uint64_t seed;
};

struct Inputs {
  HostTensor tiles, runs, q_sums, q_counts, k_sums, k_counts;
  std::vector<int64_t> top_blocks;
};

HostTensor Integers(const Shape& shape, int64_t range, std::mt19937_64& rng) {
  HostTensor t(DType::kF32, shape);
  for (int64_t i = 0; i < t.NumElements(); ++i)
    t.data<float>()[i] = static_cast<float>(static_cast<int64_t>(rng() % (2 * range + 1)) - range);
  return t;
}

Inputs MakeInputs(const Case& c) {
  std::mt19937_64 rng(c.seed);
  const int64_t n_pos = c.num_blocks * c.block - static_cast<int64_t>(rng() % c.block);
  const int64_t tile_rows = std::min(c.block, kSparseTileRows);
  std::vector<int64_t> tiles;
  for (int64_t qb = c.num_blocks - 1; qb >= 0; qb -= c.tile_every)
    for (int64_t a = qb * c.block; a < std::min(n_pos, (qb + 1) * c.block); a += tile_rows)
      tiles.insert(tiles.end(), {0, std::min(tile_rows, n_pos - a), a});
  std::vector<int64_t> cuts{0, n_pos};
  for (int64_t i = 0; i < c.cuts; ++i) cuts.push_back(static_cast<int64_t>(rng() % n_pos));
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<int64_t> runs;
  int64_t row = 0;
  for (size_t i = cuts.size() - 1; i-- > 0;) {  // later positions at lower rows
    if (!c.gaps || rng() % 3 != 0) runs.insert(runs.begin(), {cuts[i], cuts[i + 1], row});
    row += cuts[i + 1] - cuts[i];
  }
  HostTensor q_counts(DType::kF32, {c.num_blocks}), k_counts(DType::kF32, {c.num_blocks});
  const float k_choices[] = {64, 64, 64, 32, 16, 0};
  for (int64_t b = 0; b < c.num_blocks; ++b) {
    q_counts.data<float>()[b] = static_cast<float>(c.block);
    k_counts.data<float>()[b] = k_choices[rng() % 6];
  }
  Inputs in{Rows3(tiles),
            runs.empty() ? testing::I64Tensor({0, 3}, {}) : Rows3(runs),
            Integers({c.num_blocks, c.heads, c.head_dim}, c.range, rng),
            std::move(q_counts),
            Integers({c.num_blocks, c.heads, c.head_dim}, c.range, rng),
            std::move(k_counts),
            {}};
  const int64_t budgets[] = {0, 1, 2, 5, 17, 100, c.num_blocks + 5};
  for (int64_t g = 0; g < c.heads; ++g) in.top_blocks.push_back(budgets[(g + c.seed) % 7]);
  return in;
}

HostTensor PoisonedI64(const Shape& shape) {
  HostTensor t(DType::kI64, shape);
  std::memset(t.view().data, 0x7b, t.NumBytes());
  return t;
}

class BlockSparseIndexCudaTest : public testing::GpuOpTest<Case> {};

TEST_P(BlockSparseIndexCudaTest, MatchesReference) {
  const Case c = GetParam();
  Inputs in = MakeInputs(c);
  auto workspace = SparseIndexCudaWorkspace::Create();
  ASSERT_TRUE(workspace.ok());
  auto cuda = [&](const BlockSparseIndexArgs& args, cudaStream_t stream) {
    return BlockSparseIndexCuda(args, **workspace, stream);
  };
  const int64_t items = c.heads * in.tiles.shape()[0];
  std::vector<int> inputs;
  auto add_inputs = [&](OpCheck& check) {
    inputs = {check.Input(in.tiles),    check.Input(in.runs, 8), check.Input(in.q_sums, 4),
              check.Input(in.q_counts), check.Input(in.k_sums),  check.Input(in.k_counts)};
  };
  auto make = [&](const OpCheck::Tensors& t, TensorView range_offsets, TensorView ranges,
                  TensorView column_offsets, TensorView columns) {
    BlockSparseIndexArgs args;
    args.tiles = t.cview(inputs[0]);
    args.runs = t.cview(inputs[1]);
    args.q_sums = t.cview(inputs[2]);
    args.q_counts = t.cview(inputs[3]);
    args.k_sums = t.cview(inputs[4]);
    args.k_counts = t.cview(inputs[5]);
    args.block = c.block;
    args.group = c.group;
    args.top_blocks = in.top_blocks.data();
    args.skip_absent = c.gaps;
    args.out = {range_offsets, ranges, column_offsets, columns};
    return args;
  };
  OpCheck count("block_sparse_index count");
  add_inputs(count);
  const int range_offsets =
      count.Output("range_offsets", PoisonedI64({items + 1}), Tolerance::Bitwise());
  const int column_offsets =
      count.Output("column_offsets", PoisonedI64({items + 1}), Tolerance::Bitwise());
  ASSERT_TRUE(count.Run(
      [&](const OpCheck::Tensors& t) {
        return make(t, t.view(range_offsets), {nullptr, DType::kI64, {0, 3}},
                    t.view(column_offsets), {nullptr, DType::kI64, {0, 2}});
      },
      BlockSparseIndexRef, cuda));
  const int64_t n_ranges = count.expected(range_offsets).data<int64_t>()[items];
  RecordProperty("ranges", std::to_string(n_ranges));

  OpCheck fill("block_sparse_index fill");
  add_inputs(fill);
  const int fill_range_offsets =
      fill.Output("range_offsets", PoisonedI64({items + 1}), Tolerance::Bitwise());
  const int fill_column_offsets =
      fill.Output("column_offsets", PoisonedI64({items + 1}), Tolerance::Bitwise());
  const int ranges = fill.Output("ranges", PoisonedI64({n_ranges, 3}), Tolerance::Bitwise());
  HostTensor no_columns(DType::kI64, {0, 2});
  ASSERT_TRUE(fill.Run(
      [&](const OpCheck::Tensors& t) {
        return make(t, t.view(fill_range_offsets), t.view(ranges), t.view(fill_column_offsets),
                    no_columns.view());
      },
      BlockSparseIndexRef, cuda));
}

// A case's inputs in device memory and the arguments over them.
struct DeviceInputs {
  explicit DeviceInputs(const Inputs& in)
      : tiles(in.tiles),
        runs(in.runs),
        q_sums(in.q_sums),
        q_counts(in.q_counts),
        k_sums(in.k_sums),
        k_counts(in.k_counts) {}

  BlockSparseIndexArgs Args(const Case& c, const std::vector<int64_t>& top_blocks) {
    BlockSparseIndexArgs args;
    args.tiles = tiles.cview();
    args.runs = runs.cview();
    args.q_sums = q_sums.cview();
    args.q_counts = q_counts.cview();
    args.k_sums = k_sums.cview();
    args.k_counts = k_counts.cview();
    args.block = c.block;
    args.group = c.group;
    args.top_blocks = top_blocks.data();
    args.skip_absent = c.gaps;
    return args;
  }

  DeviceTensor tiles, runs, q_sums, q_counts, k_sums, k_counts;
};

// The reference's index of `in` with budgets `top_blocks`.
HostIndex ReferenceIndex(const Case& c, const Inputs& in, const std::vector<int64_t>& top_blocks) {
  BlockSparseIndexArgs args;
  args.tiles = testing::CView(in.tiles);
  args.runs = testing::CView(in.runs);
  args.q_sums = testing::CView(in.q_sums);
  args.q_counts = testing::CView(in.q_counts);
  args.k_sums = testing::CView(in.k_sums);
  args.k_counts = testing::CView(in.k_counts);
  args.block = c.block;
  args.group = c.group;
  args.top_blocks = top_blocks.data();
  args.skip_absent = c.gaps;
  auto index = testing::BuildIndex(args, c.heads * in.tiles.shape()[0], BlockSparseIndexRef);
  EXPECT_TRUE(index.ok()) << index.status().ToString();
  return index.ok() ? *index : HostIndex{};
}

TEST_P(BlockSparseIndexCudaTest, FillReusesCountPassOnlyOnExactMatch) {
  const Case c = GetParam();
  const Inputs in = MakeInputs(c);
  auto workspace = SparseIndexCudaWorkspace::Create();
  ASSERT_TRUE(workspace.ok());
  auto build = [&](const BlockSparseIndexArgs& args) {
    return BlockSparseIndexCuda(args, **workspace, nullptr);
  };
  DeviceInputs d(in);
  const int64_t items = c.heads * in.tiles.shape()[0];
  auto count_then_fill = [&](const BlockSparseIndexArgs& count_args,
                             const BlockSparseIndexArgs& fill_args, const HostIndex& expected,
                             bool unchanged, const std::function<Status()>& between = {}) {
    auto got = CountThenFillOnDevice(count_args, fill_args, items,
                                     static_cast<int64_t>(expected.ranges.size()), 0, unchanged,
                                     build, between);
    EXPECT_TRUE(got.ok()) << got.status().ToString();
    return got.ok() ? *got : HostIndex{};
  };
  const HostIndex expected = ReferenceIndex(c, in, in.top_blocks);
  const BlockSparseIndexArgs args = d.Args(c, in.top_blocks);
  const HostIndex reused = count_then_fill(args, args, expected, true);
  const HostIndex recomputed = count_then_fill(args, args, expected, false);
  ExpectSameIndex(reused, recomputed, "reused vs recomputed");
  ExpectSameIndex(reused, expected, "reused vs reference");

  // Other budgets in the fill pass: a reuse would keep the count pass's blocks and offsets.
  std::vector<int64_t> other_top;
  for (int64_t t : in.top_blocks) other_top.push_back(t > 1 ? t - 1 : 3);
  const HostIndex expected_other = ReferenceIndex(c, in, other_top);
  ExpectSameIndex(count_then_fill(args, d.Args(c, other_top), expected_other, true),
                  expected_other, "budgets changed between the passes");

  // Other key sums at another address.
  Inputs other = MakeInputs(c);
  std::mt19937_64 rng(c.seed + 1000);
  other.k_sums = Integers(in.k_sums.shape(), c.range + 1, rng);
  DeviceTensor other_k_sums(other.k_sums);
  BlockSparseIndexArgs other_args = args;
  other_args.k_sums = other_k_sums.cview();
  const HostIndex expected_k = ReferenceIndex(c, other, in.top_blocks);
  ExpectSameIndex(count_then_fill(args, other_args, expected_k, true), expected_k,
                  "key sums changed between the passes");

  // Another call on the workspace between the passes (a count pass with other budgets, which
  // overwrites the bitmaps): the fill pass must not take them.
  BlockSparseIndexArgs between_args = d.Args(c, other_top);
  DeviceTensor between_ranges(testing::PoisonedIndexTensor({items + 1}));
  DeviceTensor between_columns(testing::PoisonedIndexTensor({items + 1}));
  between_args.out = {between_ranges.view(), {nullptr, DType::kI64, {0, 3}},
                      between_columns.view(), {nullptr, DType::kI64, {0, 2}}};
  ExpectSameIndex(count_then_fill(args, args, expected, true, [&] { return build(between_args); }),
                  expected, "another call between the passes");

  // A promise with no count pass before it (a fresh workspace) builds from scratch.
  auto fresh = SparseIndexCudaWorkspace::Create();
  ASSERT_TRUE(fresh.ok());
  DeviceTensor range_offsets(testing::PoisonedIndexTensor({items + 1}));
  DeviceTensor column_offsets(testing::PoisonedIndexTensor({items + 1}));
  DeviceTensor ranges(testing::PoisonedIndexTensor(
      {static_cast<int64_t>(expected.ranges.size()), 3}));
  DeviceTensor columns(testing::PoisonedIndexTensor({0, 2}));
  BlockSparseIndexArgs fill_only = args;
  fill_only.out = {range_offsets.view(), ranges.view(), column_offsets.view(), columns.view()};
  fill_only.inputs_unchanged_since_count = true;
  const Status status = BlockSparseIndexCuda(fill_only, **fresh, nullptr);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ExpectSameIndex(testing::ReadIndex(range_offsets, ranges, column_offsets, columns), expected,
                  "a fill pass with no count pass");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, BlockSparseIndexCudaTest,
    ::testing::Values(
        // num_blocks, heads, head_dim, group, block, range, tile_every, cuts, gaps, seed
        Case{5, 1, 1, 1, 64, 1, 1, 0, false, 1}, Case{40, 8, 128, 4, 64, 200, 1, 2, false, 2},
        Case{100, 8, 16, 8, 64, 1, 1, 5, false, 3}, Case{33, 4, 40, 1, 128, 3, 1, 3, true, 4},
        Case{70, 7, 8, 4, 32, 2, 1, 0, false, 5}, Case{300, 8, 128, 4, 64, 100, 3, 8, true, 6},
        Case{2500, 8, 4, 4, 64, 2, 1, 1, false, 7}, Case{41000, 8, 2, 1, 64, 1, 20000, 0, false, 8},
        Case{64, 6, 1, 1, 64, 1, 1, 0, false, 9}));

TEST(BlockSparseIndexCudaErrorsTest, BrokenInputsAreInvalidArgument) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  auto workspace = SparseIndexCudaWorkspace::Create();
  ASSERT_TRUE(workspace.ok());
  // A zero query count, a tile crossing a block of 32, a tile beyond the blocks, a key block
  // half absent.
  struct Bad {
    std::vector<int64_t> tiles, runs;
    int64_t block;
    bool zero_query_count;
  };
  for (const Bad& bad : std::vector<Bad>{{{0, 64, 128}, {0, 256, 0}, 64, true},
                                         {{0, 64, 128}, {0, 256, 0}, 32, false},
                                         {{0, 64, 256}, {0, 320, 0}, 64, false},
                                         {{0, 64, 128}, {0, 30, 0, 64, 256, 30}, 64, false}}) {
    std::mt19937_64 rng(3);
    HostTensor tiles = Rows3(bad.tiles), runs = Rows3(bad.runs);
    HostTensor sums = Integers({4, 1, 2}, 1, rng);
    HostTensor counts = testing::TensorOf(DType::kF32, {4}, {64, 64, 64, 64});
    HostTensor q_counts = testing::TensorOf(DType::kF32, {4}, {64, 64, 0, 64});
    if (!bad.zero_query_count) q_counts.data<float>()[2] = 64;
    HostTensor offsets(DType::kI64, {2});
    const int64_t top[] = {4};
    DeviceTensor d_tiles(tiles), d_runs(runs), d_sums(sums), d_counts(counts), d_q_counts(q_counts),
        d_range_offsets(offsets), d_column_offsets(offsets);
    BlockSparseIndexArgs args;
    args.tiles = d_tiles.cview();
    args.runs = d_runs.cview();
    args.q_sums = args.k_sums = d_sums.cview();
    args.q_counts = d_q_counts.cview();
    args.k_counts = d_counts.cview();
    args.block = bad.block;
    args.top_blocks = top;
    args.out = {d_range_offsets.view(),
                {nullptr, DType::kI64, {0, 3}},
                d_column_offsets.view(),
                {nullptr, DType::kI64, {0, 2}}};
    BlockSparseIndexArgs host = args;
    host.tiles = testing::CView(tiles);
    host.runs = testing::CView(runs);
    host.q_sums = host.k_sums = testing::CView(sums);
    host.q_counts = testing::CView(q_counts);
    host.k_counts = testing::CView(counts);
    host.out.range_offsets = offsets.view();
    host.out.column_offsets = offsets.view();
    EXPECT_EQ(BlockSparseIndexRef(host).code(), StatusCode::kInvalidArgument);
    const Status got = BlockSparseIndexCuda(args, **workspace, nullptr);
    EXPECT_EQ(got.code(), StatusCode::kInvalidArgument) << got.ToString();
  }
}

}  // namespace
}  // namespace millipede
