// SelectionIndexCuda against SelectionIndexRef: random per-head selections (full, partial,
// empty heads), one to many blocks, up to 16 heads and 2^17 slots; outputs poisoned and
// guard-banded. Skips without a GPU.
#include "kernels/selection/selection_index_cuda.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <random>
#include <vector>

#include "kernels/selection/selection_index.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/op_harness.h"

namespace millipede {
namespace {

using testing::OpCheck;
using testing::Tolerance;

struct Case {
  int64_t kv_heads, rows, slots, blocks;
  bool full;  // every head fills every slot (one rank, finite scores)
};

class SelectionIndexCudaTest : public testing::GpuOpTest<Case> {};

// Each head's rows: a random increasing subset of [0, rows), as many as the slots when `full`.
HostTensor Chosen(const Case& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  HostTensor t(DType::kI32, {c.kv_heads, c.slots});
  std::vector<int32_t> all(static_cast<size_t>(c.rows)), rows;
  for (int64_t j = 0; j < c.rows; ++j) all[static_cast<size_t>(j)] = static_cast<int32_t>(j);
  for (int64_t g = 0; g < c.kv_heads; ++g) {
    const int64_t n = c.full ? c.slots : static_cast<int64_t>(rng() % (c.slots + 1));
    rows.clear();
    std::sample(all.begin(), all.end(), std::back_inserter(rows), n, rng);
    for (int64_t i = 0; i < c.slots; ++i)
      t.data<int32_t>()[g * c.slots + i] = i < n ? rows[static_cast<size_t>(i)] : -1;
  }
  return t;
}

TEST_P(SelectionIndexCudaTest, MatchesReference) {
  const Case c = GetParam();
  HostTensor index(DType::kI64, {c.blocks, c.slots * c.kv_heads}), counts(DType::kI32, {c.kv_heads});
  std::memset(index.view().data, 0x5c, index.NumBytes());
  std::memset(counts.view().data, 0x5c, counts.NumBytes());
  const int64_t stride = c.rows * c.kv_heads + 3;
  OpCheck check("selection_index");
  const int chosen = check.Input(Chosen(c, 7 + c.slots));
  const int out_index = check.Output("index", index, Tolerance::Bitwise(), 8);
  const int out_counts = check.Output("counts", counts, Tolerance::Bitwise(), 4);
  ASSERT_TRUE(check.Run(
      [&](const OpCheck::Tensors& t) {
        return SelectionIndexArgs{t.cview(chosen), c.rows, stride, t.view(out_index),
                                  t.view(out_counts)};
      },
      SelectionIndexRef, SelectionIndexCuda));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SelectionIndexCudaTest,
    ::testing::Values(Case{8, 131072, 2048, 1, true}, Case{8, 131072, 2048, 24, true},
                      Case{8, 5000, 1000, 3, false}, Case{1, 1, 1, 1, true},
                      Case{16, 300, 300, 2, false}, Case{3, 1 << 20, 1 << 17, 1, false},
                      Case{4, 10, 0, 2, false}, Case{5, 100, 37, 0, false}));

}  // namespace
}  // namespace millipede
