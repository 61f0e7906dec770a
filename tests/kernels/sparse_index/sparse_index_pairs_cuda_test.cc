// SparseIndexPairsCuda against SparseIndexPairsRef on random indices (1-8 KV heads, partial last
// tiles, ranges and columns before and after the tiles, many items), the count added to a
// non-zero start. Skips without a GPU.
#include "kernels/sparse_index/sparse_index_pairs_cuda.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "kernels/sparse_index/sparse_index_pairs.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/op_harness.h"
#include "tests/kernels/sparse_index/sparse_index_pairs_test_util.h"

namespace millipede {
namespace {

using testing::OpCheck;
using testing::Tolerance;

struct Case {
  uint64_t seed;
  int64_t heads, tiles;
};

class SparseIndexPairsCudaTest : public testing::GpuOpTest<Case> {};

TEST_P(SparseIndexPairsCudaTest, MatchesReference) {
  const Case c = GetParam();
  testing::PairsIndex index = testing::RandomPairsIndex(c.seed, c.heads, c.tiles);
  const SparseIndexPairsArgs host = index.Args();
  HostTensor start(DType::kI64, {1});
  start.data<int64_t>()[0] = 123456789;
  OpCheck check("sparse_index_pairs");
  const int tiles = check.Input(index.tiles_t);
  const int range_offsets = check.Input(index.range_offsets);
  const int ranges = check.Input(index.ranges);
  const int column_offsets = check.Input(index.column_offsets);
  const int columns = check.Input(index.columns);
  const int pairs = check.Output("pairs", start, Tolerance::Bitwise(), 8);
  ASSERT_TRUE(check.Run(
      [&](const OpCheck::Tensors& t) {
        SparseIndexPairsArgs a;
        a.tiles = t.cview(tiles);
        a.index = {t.cview(range_offsets), t.cview(ranges), t.cview(column_offsets),
                   t.cview(columns)};
        a.num_kv_heads = host.num_kv_heads;
        a.pairs = t.view(pairs);
        return a;
      },
      SparseIndexPairsRef,
      [](const SparseIndexPairsArgs& a, cudaStream_t stream) {
        return SparseIndexPairsCuda(a, stream);
      }));
}

INSTANTIATE_TEST_SUITE_P(Indices, SparseIndexPairsCudaTest,
                         ::testing::Values(Case{1, 1, 1}, Case{2, 4, 7}, Case{3, 8, 33},
                                           Case{4, 8, 400}, Case{5, 2, 2000}));

}  // namespace
}  // namespace millipede
