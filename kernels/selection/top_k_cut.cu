#include <cstdint>
#include <cub/block/block_scan.cuh>

#include "common/cuda_check.h"
#include "kernels/selection/top_k_cut_cuda.h"

namespace millipede {
namespace {

constexpr int kThreads = 512;
constexpr int kBuckets = 256;
constexpr int kDigitBits = 8;

// Warp 0 picks the digit of the `remaining`-th largest key among those counted in `hist`
// (buckets counted from the top), leaving the digit in *digit and the rank within it in
// *remaining. Lane l sums buckets 255 - 8l down to 248 - 8l.
__device__ void PickDigit(const uint32_t* hist, int64_t* remaining, uint32_t* digit) {
  const int lane = threadIdx.x;
  uint32_t sum = 0;
  for (int j = 0; j < 8; ++j) sum += hist[kBuckets - 1 - 8 * lane - j];
  uint32_t above = sum;  // inclusive scan over lanes: keys in this lane's buckets and higher
  for (int d = 1; d < 32; d <<= 1) {
    const uint32_t x = __shfl_up_sync(0xffffffffu, above, d);
    if (lane >= d) above += x;
  }
  const int64_t want = *remaining;
  const uint32_t before = above - sum;
  __syncwarp();
  if (before < want && want <= above) {
    int64_t left = want - before;
    for (int j = 0; j < 8; ++j) {
      const int b = kBuckets - 1 - 8 * lane - j;
      if (left <= hist[b]) {
        *digit = static_cast<uint32_t>(b);
        *remaining = left;
        break;
      }
      left -= hist[b];
    }
  }
}

//   keys [ranks, rows, k] (rank r's at r * stride), index [rows, k], chosen [rows, slots].
__global__ void __launch_bounds__(kThreads)
    TopKCutKernel(const uint64_t* __restrict__ keys, const int32_t* __restrict__ index,
                  int64_t ranks, int64_t stride, int64_t k, int64_t rank,
                  int32_t* __restrict__ chosen, int64_t slots) {
  using Scan = cub::BlockScan<int, kThreads>;
  __shared__ typename Scan::TempStorage scan;
  __shared__ uint32_t hist[kBuckets];
  __shared__ int64_t s_remaining;
  __shared__ uint32_t s_digit;
  const int64_t row = blockIdx.x;
  // The k-th largest key of the row, a digit at a time from the top.
  uint64_t prefix = 0, mask = 0;
  if (threadIdx.x == 0) s_remaining = k;
  for (int shift = 64 - kDigitBits; shift >= 0; shift -= kDigitBits) {
    for (int b = threadIdx.x; b < kBuckets; b += kThreads) hist[b] = 0;
    __syncthreads();
    for (int64_t j = threadIdx.x; j < ranks * k; j += kThreads) {
      const int64_t r = j / k, i = j - r * k;
      const uint64_t key = keys[r * stride + row * k + i];
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & (kBuckets - 1)], 1u);
    }
    __syncthreads();
    if (threadIdx.x < 32) PickDigit(hist, &s_remaining, &s_digit);
    __syncthreads();
    prefix |= static_cast<uint64_t>(s_digit) << shift;
    mask |= static_cast<uint64_t>(kBuckets - 1) << shift;
  }
  const uint64_t threshold = prefix;
  // This rank's kept entries, compacted in order.
  const uint64_t* own = keys + rank * stride + row * k;
  int32_t* out = chosen + row * slots;
  int64_t base = 0;
  for (int64_t start = 0; start < k; start += kThreads) {
    const int64_t i = start + threadIdx.x;
    const uint64_t key = i < k ? own[i] : 0;
    const int keep = key != 0 && key >= threshold ? 1 : 0;
    int at, total;
    Scan(scan).ExclusiveSum(keep, at, total);
    if (keep && base + at < slots) out[base + at] = index[row * k + i];
    base += total;
    __syncthreads();  // the scan's storage is reused
  }
  for (int64_t j = base + threadIdx.x; j < slots; j += kThreads) out[j] = -1;
}

}  // namespace

Status TopKCutCuda(const TopKCutArgs& args, cudaStream_t stream) {
  MP_RETURN_IF_ERROR(TopKCutCheckArgs(args));
  const int64_t ranks = args.keys.dim(0), rows = args.keys.dim(1), k = args.keys.dim(2);
  if (rows == 0 || k == 0) return OkStatus();
  MP_REQUIRE(rows < (int64_t{1} << 31), "top_k cut: ", rows, " rows is too many");
  TopKCutKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      args.keys.as<const uint64_t>(), args.index.as<const int32_t>(), ranks,
      args.rank_stride > 0 ? args.rank_stride : rows * k, k, args.rank, args.chosen.as<int32_t>(),
      args.chosen.dim(1));
  MP_CUDA_CHECK_LAUNCH();
  return OkStatus();
}

}  // namespace millipede
