#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/selection/top_k_key.h"
#include "kernels/selection/top_k_keys_cuda.h"

namespace millipede {
namespace {

constexpr int kThreads = 256;

// Column c's position: the ranges' first columns and positions, by value.
struct Ranges {
  int count;
  int64_t first_column[kTopKKeysMaxRanges];
  int64_t first_position[kTopKKeysMaxRanges];
};

//   index, value, keys [n]
__global__ void TopKKeysKernel(const int32_t* __restrict__ index, const float* __restrict__ value,
                               int64_t n, Ranges ranges, uint64_t* __restrict__ keys) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int32_t column = index[i];
  if (column < 0) {
    keys[i] = 0;
    return;
  }
  int r = 0;
  while (r + 1 < ranges.count && ranges.first_column[r + 1] <= column) ++r;
  const int64_t position = ranges.first_position[r] + (column - ranges.first_column[r]);
  keys[i] = TopKEntryKey(TopKFloatKey(value[i]), static_cast<uint64_t>(position));
}

}  // namespace

Status TopKKeysCuda(const TopKKeysArgs& args, cudaStream_t stream) {
  MP_RETURN_IF_ERROR(TopKKeysCheckArgs(args));
  const int64_t n = args.index.NumElements();
  if (n == 0) return OkStatus();
  Ranges ranges{};
  int64_t column = 0;
  for (const TopKPositionRange& r : args.ranges) {
    ranges.first_column[ranges.count] = column;
    ranges.first_position[ranges.count] = r.begin;
    ++ranges.count;
    column += r.end - r.begin;
  }
  if (ranges.count == 0) ranges.count = 1;  // no column is valid: every slot is empty
  const int64_t grid = (n + kThreads - 1) / kThreads;
  MP_REQUIRE(grid < (int64_t{1} << 31), "top_k keys: ", n, " entries is too many");
  TopKKeysKernel<<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(
      args.index.as<const int32_t>(), args.value.as<const float>(), n, ranges,
      args.keys.as<uint64_t>());
  MP_CUDA_CHECK_LAUNCH();
  return OkStatus();
}

}  // namespace millipede
