// BlockSumsCuda against BlockSumsRef: random x (F32, BF16, F16), head groups of 1, 4 and 8
// (keys, and queries of GQA 4/8), odd sizes and blocks, several runs in shuffled row order and
// positions that leave some blocks partial or empty; sums within fp32 rounding of the double
// reference, counts exact, outputs poisoned inside guard bands. Broken runs are InvalidArgument
// errors as on the CPU. Skips without a GPU.
#include "kernels/sparse_index/block_sums_cuda.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "kernels/sparse_index/block_sums.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/op_harness.h"
#include "tests/kernels/sparse_index/sparse_index_test_util.h"

namespace millipede {
namespace {

using testing::DeviceTensor;
using testing::HaveGpu;
using testing::OpCheck;
using testing::Rows3;
using testing::Tolerance;

struct Case {
  int64_t n, heads, group, head_dim, block, first_pos, pieces;
  DType dtype;
};

class BlockSumsCudaTest : public testing::GpuOpTest<Case> {};

// Positions [first_pos, first_pos + n) cut into `pieces` runs held in shuffled row order.
HostTensor MakeRuns(const Case& c, std::mt19937_64& rng) {
  std::vector<int64_t> cuts{0, c.n};
  for (int64_t i = 0; i + 1 < c.pieces; ++i) cuts.push_back(static_cast<int64_t>(rng() % c.n));
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<size_t> order(cuts.size() - 1);
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<int64_t> row(order.size());
  int64_t next = 0;
  for (size_t i : order) {
    row[i] = next;
    next += cuts[i + 1] - cuts[i];
  }
  std::vector<int64_t> runs;
  for (size_t i = 0; i + 1 < cuts.size(); ++i)
    runs.insert(runs.end(), {c.first_pos + cuts[i], c.first_pos + cuts[i + 1], row[i]});
  return Rows3(runs);
}

TEST_P(BlockSumsCudaTest, MatchesReference) {
  const Case c = GetParam();
  std::mt19937_64 rng(static_cast<uint64_t>(c.n * 31 + c.heads));
  auto workspace = SparseIndexCudaWorkspace::Create();
  ASSERT_TRUE(workspace.ok());
  // One block beyond the last position, so that an empty block is written too.
  const int64_t num_blocks = (c.first_pos + c.n + c.block - 1) / c.block + 1;
  OpCheck check("block_sums");
  const int x = check.Input(testing::RandomTensor(c.dtype, {c.n, c.heads, c.head_dim}, 5),
                            DTypeSize(c.dtype));
  const int runs = check.Input(MakeRuns(c, rng));
  const int sums =
      check.Output("sums", testing::PoisonedF32({num_blocks, c.heads / c.group, c.head_dim}),
                   Tolerance::Normalised(1e-5));
  const int counts = check.Output("counts", testing::PoisonedF32({num_blocks}), Tolerance::Exact());
  ASSERT_TRUE(check.Run(
      [&](const OpCheck::Tensors& t) {
        return BlockSumsArgs{t.cview(x), t.cview(runs), c.block,
                             c.group,    t.view(sums),  t.view(counts)};
      },
      BlockSumsRef,
      [&](const BlockSumsArgs& args, cudaStream_t stream) {
        return BlockSumsCuda(args, **workspace, stream);
      }));
}

INSTANTIATE_TEST_SUITE_P(Shapes, BlockSumsCudaTest,
                         ::testing::Values(Case{1000, 8, 1, 128, 64, 0, 1, DType::kBF16},
                                           Case{1000, 32, 4, 128, 64, 0, 3, DType::kBF16},
                                           Case{777, 32, 8, 128, 64, 50, 5, DType::kF16},
                                           Case{130, 6, 3, 40, 48, 7, 4, DType::kF32},
                                           Case{1, 1, 1, 1, 64, 0, 1, DType::kF32},
                                           Case{5000, 4, 4, 256, 64, 1000, 9, DType::kBF16},
                                           Case{64, 2, 1, 7, 1, 3, 2, DType::kF32},
                                           Case{1000, 32, 4, 128, 64, 0, 3, DType::kF8E4M3}));

TEST(BlockSumsCudaErrorsTest, BrokenRunsAreInvalidArgument) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  auto workspace = SparseIndexCudaWorkspace::Create();
  ASSERT_TRUE(workspace.ok());
  HostTensor x = testing::RandomTensor(DType::kF32, {10, 2, 3}, 8);
  DeviceTensor d_x(x);
  for (const auto& runs : std::vector<std::vector<int64_t>>{
           {0, 9, 0}, {0, 10, 0, 20, 21, 9}, {10, 20, 0}, {5, 10, 5, 0, 5, 0}, {0, 10, 0}}) {
    HostTensor r = Rows3(runs), sums(DType::kF32, {2, 2, 3}), counts(DType::kF32, {2});
    DeviceTensor d_runs(r), d_sums(sums), d_counts(counts);
    const BlockSumsArgs host{testing::CView(x), testing::CView(r), 8, 1,
                             sums.view(),       counts.view()};
    const BlockSumsArgs dev{d_x.cview(), d_runs.cview(), 8, 1, d_sums.view(), d_counts.view()};
    EXPECT_EQ(BlockSumsCuda(dev, **workspace, nullptr).code(), BlockSumsRef(host).code())
        << runs.size();
  }
}

}  // namespace
}  // namespace millipede
