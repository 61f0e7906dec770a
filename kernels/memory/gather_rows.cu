#include <algorithm>
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/cuda_util.cuh"
#include "kernels/memory/gather_rows_cuda.h"

namespace millipede {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int64_t kMaxBlocks = 8192;
// Warp steps whose loads are issued before their stores (rows of at most 32 units).
constexpr int kUnroll = 4;

// One warp per output row (grid-strided), each lane moving `Unit`s of the row: consecutive lanes
// read consecutive units, so a warp's loads coalesce, which matters most when src is host memory
// read across PCIe.
//   src [n, row_units], index [m], dst [m, row_units] (in Units).
template <typename Unit, typename Index>
__global__ void GatherRowsKernel(const Unit* __restrict__ src, const Index* __restrict__ index,
                                 Unit* __restrict__ dst, int64_t n, int64_t m, int64_t row_units,
                                 int64_t* __restrict__ bad) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; i < m;
       i += warps) {
    const int64_t row = static_cast<int64_t>(index[i]);
    Unit* out = dst + i * row_units;
    if (row < 0 || row >= n) {
      for (int64_t c = lane; c < row_units; c += 32) out[c] = Unit{};
      if (lane == 0 && bad != nullptr) *bad = i;
      continue;
    }
    const Unit* in = src + row * row_units;
    for (int64_t c = lane; c < row_units; c += 32) out[c] = in[c];
  }
}

// Rows of at most 32 units that divide the warp (the KV rows of one head: 256 bytes are 16
// units): each lane moves one unit, a warp covers 32 / row_units rows per step, and kUnroll
// steps' loads are all issued before the first store, so each warp keeps up to 2 KiB of reads in
// flight — what a few dozen blocks need to fill PCIe when src is host memory.
template <typename Unit, typename Index>
__global__ void GatherSmallRowsKernel(const Unit* __restrict__ src, const Index* __restrict__ index,
                                      Unit* __restrict__ dst, int64_t n, int64_t m,
                                      int64_t row_units, int64_t* __restrict__ bad) {
  const int lane = threadIdx.x % 32;
  const int64_t per_warp = 32 / row_units, c = lane % row_units;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kWarps * per_warp;
  const int64_t first =
      (static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32) * per_warp + lane / row_units;
  for (int64_t base = first; base < m; base += step * kUnroll) {
    Unit value[kUnroll];
    int64_t out[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + u * step;
      out[u] = -1;
      value[u] = Unit{};
      if (i >= m) continue;
      out[u] = i;
      const int64_t row = static_cast<int64_t>(index[i]);
      if (row >= 0 && row < n) {
        value[u] = src[row * row_units + c];
      } else if (c == 0 && bad != nullptr) {
        *bad = i;
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (out[u] >= 0) dst[out[u] * row_units + c] = value[u];
  }
}

template <typename Unit, typename Index>
void LaunchFor(const GatherRowsArgs& args, int64_t row_units, int64_t max_blocks, int64_t* bad,
               cudaStream_t stream) {
  const int64_t n = args.src.dim(0), m = args.index.dim(0);
  const Unit* src = static_cast<const Unit*>(args.src.data);
  const Index* index = args.index.as<const Index>();
  Unit* dst = static_cast<Unit*>(args.dst.data);
  if (row_units >= 1 && row_units <= 32 && 32 % row_units == 0) {
    const int64_t rows_per_block = kWarps * (32 / row_units) * kUnroll;
    const unsigned blocks =
        static_cast<unsigned>(std::min((m + rows_per_block - 1) / rows_per_block, max_blocks));
    GatherSmallRowsKernel<Unit, Index><<<blocks, kThreads, 0, stream>>>(src, index, dst, n, m,
                                                                        row_units, bad);
  } else {
    const unsigned blocks =
        static_cast<unsigned>(std::min<int64_t>((m + kWarps - 1) / kWarps, max_blocks));
    GatherRowsKernel<Unit, Index><<<blocks, kThreads, 0, stream>>>(src, index, dst, n, m,
                                                                   row_units, bad);
  }
}

template <typename Unit>
Status Launch(const GatherRowsArgs& args, int64_t row_bytes, int64_t max_blocks, int64_t* bad,
              cudaStream_t stream) {
  const int64_t row_units = row_bytes / static_cast<int64_t>(sizeof(Unit));
  if (args.index.dtype == DType::kI32)
    LaunchFor<Unit, int32_t>(args, row_units, max_blocks, bad, stream);
  else
    LaunchFor<Unit, int64_t>(args, row_units, max_blocks, bad, stream);
  MP_CUDA_CHECK_LAUNCH();
  return OkStatus();
}

// The widest unit (16, 8, 4, 2 or 1 bytes) dividing the row size and both base addresses.
int UnitBytes(const GatherRowsArgs& args, int64_t row_bytes) {
  for (int unit : {16, 8, 4, 2}) {
    if (row_bytes % unit == 0 && cuda_util::IsAligned(args.src.data, unit) &&
        cuda_util::IsAligned(args.dst.data, unit))
      return unit;
  }
  return 1;
}

}  // namespace

Status GatherRowsCuda(const GatherRowsArgs& args, int64_t* bad, cudaStream_t stream,
                      int64_t max_blocks) {
  MP_RETURN_IF_ERROR(GatherRowsCheckArgs(args));
  MP_REQUIRE(max_blocks >= 0, "gather rows: max_blocks ", max_blocks, " < 0");
  max_blocks = max_blocks == 0 ? kMaxBlocks : std::min(max_blocks, kMaxBlocks);
  const int64_t m = args.index.dim(0);
  const int64_t row_elems = args.dst.dim(0) > 0 ? args.dst.NumElements() / args.dst.dim(0) : 0;
  const int64_t row_bytes = row_elems * static_cast<int64_t>(DTypeSize(args.src.dtype));
  if (m == 0) return OkStatus();
  switch (UnitBytes(args, row_bytes)) {
    case 16:
      return Launch<uint4>(args, row_bytes, max_blocks, bad, stream);
    case 8:
      return Launch<uint2>(args, row_bytes, max_blocks, bad, stream);
    case 4:
      return Launch<uint32_t>(args, row_bytes, max_blocks, bad, stream);
    case 2:
      return Launch<uint16_t>(args, row_bytes, max_blocks, bad, stream);
    default:
      return Launch<uint8_t>(args, row_bytes, max_blocks, bad, stream);
  }
}

}  // namespace millipede
