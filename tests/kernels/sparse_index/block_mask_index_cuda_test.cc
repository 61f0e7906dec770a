// BlockMaskIndexCuda against BlockMaskIndexRef, entry for entry: random bitmaps (bits after the
// query block set too, which both ignore), windows of query blocks (qb_begin), heads the bitmaps
// do not serve, blocks of 16/64/128 positions, partial tiles, layouts of several runs and gaps
// (skip_absent), outputs poisoned inside guard bands; a fill pass that reuses its count pass
// gives the same index as one that recomputes it; broken inputs are InvalidArgument errors as on
// the CPU. Skips without a GPU.
#include "kernels/sparse_index/block_mask_index_cuda.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/sparse_index/block_mask_index.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/op_harness.h"
#include "tests/kernels/sparse_index/sparse_index_cuda_test_util.h"
#include "tests/kernels/sparse_index/sparse_index_test_util.h"

namespace millipede {
namespace {

using testing::CountThenFillOnDevice;
using testing::DeviceTensor;
using testing::ExpectSameIndex;
using testing::HostIndex;
using testing::Rows3;

struct Case {
  int64_t n_qb, qb_begin, heads, block, cuts;
  bool gaps;
  uint64_t seed;
};

struct Inputs {
  HostTensor tiles, runs, kept;
  std::vector<int64_t> heads;
};

Inputs MakeInputs(const Case& c) {
  std::mt19937_64 rng(c.seed);
  const int64_t qb_end = c.qb_begin + c.n_qb;
  const int64_t n_pos = qb_end * c.block - static_cast<int64_t>(rng() % c.block);
  const int64_t tile_rows = std::min(c.block, kSparseTileRows);
  std::vector<int64_t> tiles;
  int64_t row = 0;
  for (int64_t a = c.qb_begin * c.block; a < n_pos; a += tile_rows) {
    const int64_t rows = std::min(tile_rows, n_pos - a) - static_cast<int64_t>(rng() % 3 == 0);
    if (rows <= 0) continue;
    tiles.insert(tiles.end(), {row, row + rows, a});
    row += rows;
  }
  std::vector<int64_t> cuts{0, n_pos};
  for (int64_t i = 0; i < c.cuts; ++i) cuts.push_back(static_cast<int64_t>(rng() % n_pos));
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<int64_t> runs;
  row = 0;
  for (size_t i = cuts.size() - 1; i-- > 0;) {
    if (!c.gaps || rng() % 3 != 0) runs.insert(runs.begin(), {cuts[i], cuts[i + 1], row});
    row += cuts[i + 1] - cuts[i];
  }
  const int64_t words = (qb_end - 1) / 32 + 1 + static_cast<int64_t>(rng() % 2);
  HostTensor kept(DType::kI32, {c.heads, c.n_qb, words});
  for (int64_t i = 0; i < kept.NumElements(); ++i) {
    uint32_t w = static_cast<uint32_t>(rng());
    if (rng() % 4 == 0) w = ~0u;  // long runs
    if (rng() % 4 == 0) w = 0u;
    reinterpret_cast<uint32_t*>(kept.data<int32_t>())[i] = w;
  }
  Inputs in{Rows3(tiles),
            runs.empty() ? testing::I64Tensor({0, 3}, {}) : Rows3(runs),
            std::move(kept),
            {}};
  for (int64_t g = 0; g < c.heads; ++g) in.heads.push_back((g + c.seed) % 4 == 3 ? 0 : 1);
  return in;
}

HostIndex ReferenceIndex(const Case& c, const Inputs& in) {
  BlockMaskIndexArgs args;
  args.tiles = testing::CView(in.tiles);
  args.runs = testing::CView(in.runs);
  args.kept = testing::CView(in.kept);
  args.qb_begin = c.qb_begin;
  args.block = c.block;
  args.heads = in.heads.data();
  args.skip_absent = c.gaps;
  auto index = testing::BuildIndex(args, c.heads * in.tiles.shape()[0], BlockMaskIndexRef);
  EXPECT_TRUE(index.ok()) << index.status().ToString();
  return index.ok() ? *index : HostIndex{};
}

class BlockMaskIndexCudaTest : public testing::GpuOpTest<Case> {};

TEST_P(BlockMaskIndexCudaTest, MatchesReferenceAndReusesTheCountPass) {
  const Case c = GetParam();
  const Inputs in = MakeInputs(c);
  auto workspace = SparseIndexCudaWorkspace::Create();
  ASSERT_TRUE(workspace.ok());
  auto build = [&](const BlockMaskIndexArgs& args) {
    return BlockMaskIndexCuda(args, **workspace, nullptr);
  };
  DeviceTensor tiles(in.tiles), runs(in.runs), kept(in.kept);
  BlockMaskIndexArgs args;
  args.tiles = tiles.cview();
  args.runs = runs.cview();
  args.kept = kept.cview();
  args.qb_begin = c.qb_begin;
  args.block = c.block;
  args.heads = in.heads.data();
  args.skip_absent = c.gaps;
  const HostIndex expected = ReferenceIndex(c, in);
  const int64_t items = c.heads * in.tiles.shape()[0];
  RecordProperty("ranges", std::to_string(expected.ranges.size()));
  for (bool unchanged : {true, false}) {
    auto got = CountThenFillOnDevice(
        args, args, items, static_cast<int64_t>(expected.ranges.size()), 0, unchanged, build);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ExpectSameIndex(*got, expected, unchanged ? "reused" : "recomputed");
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, BlockMaskIndexCudaTest,
                         ::testing::Values(Case{5, 0, 1, 16, 0, false, 1},
                                           Case{40, 0, 4, 64, 3, false, 2},
                                           Case{33, 7, 8, 128, 5, true, 3},
                                           Case{300, 20, 2, 32, 9, true, 4},
                                           Case{1100, 0, 3, 64, 0, false, 5}));

TEST(BlockMaskIndexCudaErrors, AsOnTheCpu) {
  if (!testing::HaveGpu()) GTEST_SKIP() << "no CUDA device";
  auto workspace = SparseIndexCudaWorkspace::Create();
  ASSERT_TRUE(workspace.ok());
  HostTensor bits(DType::kI32, {1, 4, 1});
  std::memset(bits.view().data, 0xff, bits.NumBytes());
  const std::vector<int64_t> heads{1};
  for (const auto& [tiles_values, what] : std::vector<std::pair<std::vector<int64_t>, const char*>>{
           {{0, 10, 10}, "crosses a multiple of block 16"}, {{0, 4, 80}, "beyond 4 blocks"}}) {
    DeviceTensor tiles(Rows3(tiles_values)), runs(Rows3({0, 96, 0})), kept(bits);
    DeviceTensor offsets(testing::PoisonedIndexTensor({2})),
        columns(testing::PoisonedIndexTensor({2}));
    BlockMaskIndexArgs args;
    args.tiles = tiles.cview();
    args.runs = runs.cview();
    args.kept = kept.cview();
    args.block = 16;
    args.heads = heads.data();
    args.out = {offsets.view(),
                {nullptr, DType::kI64, {0, 3}},
                columns.view(),
                {nullptr, DType::kI64, {0, 2}}};
    const Status s = BlockMaskIndexCuda(args, **workspace, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << what;
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace millipede
