// CopyHeadsCuda against CopyHeadsRef, byte for byte: dtypes and head widths that take every copy
// width (16 down to 1 byte), unaligned views, packs and unpacks of query-sized and KV-sized
// heads, one row (a decode token) and many (a prefill step), dst heads left alone, guard bands
// around dst. Skips without a GPU.
#include "kernels/memory/copy_heads_cuda.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kernels/memory/copy_heads.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/op_harness.h"

namespace millipede {
namespace {

using testing::OpCheck;
using testing::RandomBytes;
using testing::Tolerance;

struct Case {
  DType dtype;
  int64_t n, src_heads, dst_heads, width;
  std::vector<int32_t> from, to;
  size_t offset_bytes = 0;
};

class CopyHeadsCudaTest : public testing::GpuOpTest<Case> {};

TEST_P(CopyHeadsCudaTest, MatchesReference) {
  const Case c = GetParam();
  OpCheck check("copy_heads");
  const int isrc = check.Input(RandomBytes(c.dtype, {c.n, c.src_heads, c.width}, 1),
                               c.offset_bytes);
  // dst starts as random bytes on both sides: heads outside the list must keep them.
  const int idst = check.Output("dst", RandomBytes(c.dtype, {c.n, c.dst_heads, c.width}, 2),
                                Tolerance::Bitwise(), c.offset_bytes);
  check.Run(
      [&](const OpCheck::Tensors& t) {
        return CopyHeadsArgs{t.cview(isrc), t.view(idst), c.from, c.to};
      },
      [](const CopyHeadsArgs& a) { return CopyHeadsRef(a); },
      [](const CopyHeadsArgs& a, cudaStream_t stream) { return CopyHeadsCuda(a, stream); });
}

std::vector<int32_t> Iota(int32_t begin, int32_t end, int32_t step = 1) {
  std::vector<int32_t> v;
  for (int32_t i = begin; i < end; i += step) v.push_back(i);
  return v;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CopyHeadsCudaTest,
    ::testing::Values(
        // Queries of a decode token: 32 heads of 128 F32, the 16 of four KV heads packed.
        Case{DType::kF32, 1, 32, 16, 128, Iota(4, 20), Iota(0, 16)},
        // ... and unpacked into every other head.
        Case{DType::kF32, 1, 16, 32, 128, Iota(0, 16), Iota(0, 32, 2)},
        // A prefill step's keys: bf16 [n, 8, 128] -> [n, 3, 128].
        Case{DType::kBF16, 3000, 8, 3, 128, {1, 5, 6}, {0, 1, 2}},
        // LSE rows: [n, 32, 1] F32 (4-byte units).
        Case{DType::kF32, 777, 12, 32, 1, Iota(0, 12), Iota(20, 32)},
        Case{DType::kF16, 50, 4, 4, 3, {3, 0}, {1, 2}, 2},   // 2-byte units, unaligned
        Case{DType::kU8, 33, 5, 7, 5, {4, 2, 0}, {6, 0, 3}, 1},  // 1-byte units
        Case{DType::kF32, 65, 6, 6, 2, {5, 4, 3, 2, 1, 0}, Iota(0, 6), 8},  // 8-byte units
        Case{DType::kBF16, 0, 8, 4, 128, {1}, {0}},
        Case{DType::kBF16, 5, 300, 256, 64, Iota(44, 300), Iota(0, 256)}));

}  // namespace
}  // namespace millipede
