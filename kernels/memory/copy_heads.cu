#include <algorithm>
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/cuda_util.cuh"
#include "kernels/memory/copy_heads_cuda.h"

namespace millipede {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int64_t kMaxBlocks = 16384;

struct HeadLists {
  int16_t src[kCopyHeadsMax];
  int16_t dst[kCopyHeadsMax];
};

// One warp per (row, pair), grid-strided; the lanes move the head's units, so a warp's loads and
// stores each cover one contiguous head.
//   src [n, src_heads, units], dst [n, dst_heads, units] (in Units).
template <typename Unit>
__global__ void CopyHeadsKernel(const Unit* __restrict__ src, Unit* __restrict__ dst, int64_t n,
                                int pairs, int64_t src_heads, int64_t dst_heads, int64_t units,
                                const __grid_constant__ HeadLists lists) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; i < n * pairs;
       i += warps) {
    const int64_t t = i / pairs;
    const int j = static_cast<int>(i - t * pairs);
    const Unit* in = src + (t * src_heads + lists.src[j]) * units;
    Unit* out = dst + (t * dst_heads + lists.dst[j]) * units;
    for (int64_t c = lane; c < units; c += 32) out[c] = in[c];
  }
}

template <typename Unit>
Status Launch(const CopyHeadsArgs& args, const HeadLists& lists, int64_t head_bytes,
              cudaStream_t stream) {
  const int64_t n = args.src.dim(0), pairs = static_cast<int64_t>(args.src_heads.size());
  const unsigned blocks =
      static_cast<unsigned>(std::min((n * pairs + kWarps - 1) / kWarps, kMaxBlocks));
  CopyHeadsKernel<Unit><<<blocks, kThreads, 0, stream>>>(
      static_cast<const Unit*>(args.src.data), static_cast<Unit*>(args.dst.data), n,
      static_cast<int>(pairs), args.src.dim(1), args.dst.dim(1),
      head_bytes / static_cast<int64_t>(sizeof(Unit)), lists);
  MP_CUDA_CHECK_LAUNCH();
  return OkStatus();
}

}  // namespace

Status CopyHeadsCuda(const CopyHeadsArgs& args, cudaStream_t stream) {
  MP_RETURN_IF_ERROR(CopyHeadsCheckArgs(args));
  const int64_t pairs = static_cast<int64_t>(args.src_heads.size());
  if (args.src.dim(0) == 0 || pairs == 0 || args.src.dim(2) == 0) return OkStatus();
  MP_REQUIRE(args.src.dim(1) <= INT16_MAX && args.dst.dim(1) <= INT16_MAX,
             "copy_heads: more than ", INT16_MAX, " heads");
  HeadLists lists{};
  for (int64_t j = 0; j < pairs; ++j) {
    lists.src[j] = static_cast<int16_t>(args.src_heads[static_cast<size_t>(j)]);
    lists.dst[j] = static_cast<int16_t>(args.dst_heads[static_cast<size_t>(j)]);
  }
  const int64_t head_bytes = args.src.dim(2) * static_cast<int64_t>(DTypeSize(args.src.dtype));
  // The widest unit dividing a head's bytes and both base addresses.
  for (int unit : {16, 8, 4, 2}) {
    if (head_bytes % unit != 0 || !cuda_util::IsAligned(args.src.data, unit) ||
        !cuda_util::IsAligned(args.dst.data, unit))
      continue;
    switch (unit) {
      case 16: return Launch<uint4>(args, lists, head_bytes, stream);
      case 8: return Launch<uint2>(args, lists, head_bytes, stream);
      case 4: return Launch<uint32_t>(args, lists, head_bytes, stream);
      default: return Launch<uint16_t>(args, lists, head_bytes, stream);
    }
  }
  return Launch<uint8_t>(args, lists, head_bytes, stream);
}

}  // namespace millipede
