// GatherRowsCuda against GatherRowsRef, byte for byte: dtypes and row sizes that take every copy
// width (16 down to 1 byte), I32 and I64 indices with repeats, unaligned views, a source in
// mapped pinned host memory (the host KV tier's case), rows narrow enough for several per warp
// and wider than a warp, grids capped far below the rows (as the copy queue's), out-of-range
// indices (zero rows and the reported position, never a read outside src), guard bands around
// dst. Skips without a GPU.
#include "kernels/memory/gather_rows_cuda.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/memory/gather_rows.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/op_harness.h"

namespace millipede {
namespace {

using testing::DeviceTensor;
using testing::HaveGpu;
using testing::OpCheck;
using testing::RandomBytes;
using testing::Tolerance;

HostTensor RandomIndex(DType dtype, int64_t m, int64_t n, uint64_t seed) {
  HostTensor t(dtype, {m});
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < m; ++i) {
    const int64_t row = static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
    if (dtype == DType::kI32)
      t.data<int32_t>()[i] = static_cast<int32_t>(row);
    else
      t.data<int64_t>()[i] = row;
  }
  return t;
}

// The kernel's report of a bad index: -1 until it meets one.
HostTensor NoBadIndex() {
  HostTensor t(DType::kI64, {1});
  t.data<int64_t>()[0] = -1;
  return t;
}

// Page-locked, mapped host memory holding a copy of `host`; freed on scope exit.
class PinnedCopy {
 public:
  explicit PinnedCopy(const HostTensor& host) : host_(host.view()) {
    EXPECT_EQ(cudaHostAlloc(&data_, std::max<size_t>(host.NumBytes(), 1), cudaHostAllocMapped),
              cudaSuccess);
    std::memcpy(data_, host.view().data, host.NumBytes());
  }
  ~PinnedCopy() { cudaFreeHost(data_); }
  PinnedCopy(const PinnedCopy&) = delete;
  PinnedCopy& operator=(const PinnedCopy&) = delete;
  ConstTensorView cview() const { return {data_, host_.dtype, host_.shape}; }

 private:
  ConstTensorView host_;
  void* data_ = nullptr;
};

struct Case {
  DType dtype;
  int64_t n, width, m;
  DType index_dtype;
  size_t offset_bytes;  // moves src and dst off their allocation's alignment
  int64_t max_blocks = 0;  // GatherRowsCuda's grid cap (0: none)
};

class GatherRowsCudaTest : public testing::GpuOpTest<Case> {};

// The args and where the kernel reports a bad index (the reference reports none).
struct GatherRun {
  GatherRowsArgs args;
  int64_t* bad_index;
};

TEST_P(GatherRowsCudaTest, MatchesReferenceFromDeviceAndPinnedHostMemory) {
  const Case c = GetParam();
  const HostTensor src = RandomBytes(c.dtype, {c.n, c.width}, 3);
  PinnedCopy pinned_src(src);
  for (bool from_host : {false, true}) {
    SCOPED_TRACE(from_host ? "pinned host src" : "device src");
    OpCheck check("gather_rows");
    const int isrc = check.Input(src, c.offset_bytes);
    const int iindex = check.Input(RandomIndex(c.index_dtype, c.m, c.n, 4));
    // dst starts as the same random bytes on both sides; the reference overwrites every row, so
    // a row the kernel skips keeps bytes the reference replaced.
    const int idst = check.Output("dst", RandomBytes(c.dtype, {c.m, c.width}, 6),
                                  Tolerance::Bitwise(), c.offset_bytes);
    const int ibad = check.Output("bad index", NoBadIndex(), Tolerance::Bitwise());
    check.Run(
        [&](const OpCheck::Tensors& t) {
          const ConstTensorView source = from_host ? pinned_src.cview() : t.cview(isrc);
          return GatherRun{{source, t.cview(iindex), t.view(idst)}, t.view(ibad).as<int64_t>()};
        },
        [](const GatherRun& run) { return GatherRowsRef(run.args); },
        [&](const GatherRun& run, cudaStream_t stream) {
          return GatherRowsCuda(run.args, run.bad_index, stream, c.max_blocks);
        });
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, GatherRowsCudaTest,
                         ::testing::Values(Case{DType::kBF16, 1000, 128, 777, DType::kI32,
                                                0},  // 16-byte units
                                           Case{DType::kF32, 64, 2, 300, DType::kI64, 0},  // 8
                                           Case{DType::kF16, 50, 6, 129, DType::kI32, 4},  // 4
                                           Case{DType::kBF16, 33, 3, 70, DType::kI64, 2},  // 2
                                           Case{DType::kU8, 17, 5, 40, DType::kI32, 1},    // 1
                                           Case{DType::kBF16, 4096, 128, 20000, DType::kI64, 0},
                                           Case{DType::kI64, 9, 1, 1, DType::kI32, 0},
                                           Case{DType::kF32, 5, 7, 0, DType::kI32, 0},
                                           // Wide rows (the one-warp-per-row kernel), and grids
                                           // capped far below the rows (the copy queue's).
                                           Case{DType::kBF16, 300, 1024, 500, DType::kI32, 0},
                                           Case{DType::kBF16, 4096, 128, 20000, DType::kI64, 0, 3},
                                           Case{DType::kF32, 64, 2, 3000, DType::kI32, 0, 1},
                                           Case{DType::kU8, 17, 5, 400, DType::kI64, 1, 2}));

TEST(GatherRowsCudaBadIndexTest, ZeroRowAndReportedPositionNoOutOfBoundsRead) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  const int64_t n = 8;
  // 64-byte rows (several per warp) and 400-byte rows (one warp per row).
  for (int64_t width : {16, 100}) {
    HostTensor src = RandomBytes(DType::kF32, {n, width}, 7);
    for (int64_t bad : {int64_t{-1}, n, int64_t{1} << 40}) {
      HostTensor index = testing::TensorOf(DType::kI64, {4}, {0, 0, 0, 0});
      const int64_t rows[] = {3, 7, bad, 0};
      for (int i = 0; i < 4; ++i) index.data<int64_t>()[i] = rows[i];
      // src sits between guard bands: a read of row `bad` would hit them or beyond, and a wrong
      // write would show in dst's guards.
      DeviceTensor d_src(src), d_index(index), d_dst(RandomBytes(DType::kF32, {4, width}, 8));
      DeviceTensor d_bad(NoBadIndex());
      ASSERT_TRUE(GatherRowsCuda({d_src.cview(), d_index.cview(), d_dst.view()},
                                 d_bad.view().as<int64_t>(), nullptr)
                      .ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const HostTensor dst = d_dst.Read();
      EXPECT_EQ(d_bad.Read().data<int64_t>()[0], 2) << "index " << bad << " width " << width;
      for (int i = 0; i < 4; ++i)
        for (int64_t c = 0; c < width; ++c)
          EXPECT_EQ(dst.data<float>()[i * width + c],
                    i == 2 ? 0.0f : src.data<float>()[rows[i] * width + c]);
    }
  }
}

}  // namespace
}  // namespace millipede
