#include <algorithm>
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/cuda_util.cuh"
#include "kernels/layer/embedding_cuda.h"

namespace millipede {
namespace {

constexpr int kMaxThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 20;

// kVec consecutive elements moved by one load or store (16 bytes for F32, 8 for BF16/F16).
template <typename T, int kVec>
struct alignas(sizeof(T) * kVec) Pack {
  T v[kVec];
};

// One block per output row (grid-strided): out[row] = float(table[ids[row]]), kVec elements per
// thread step so that a warp moves whole 128-byte lines.
//   ids [n] I32, table [vocab, hidden] of T, out [n, hidden] F32; hidden % kVec == 0 and both
//   buffers aligned to a Pack.
template <typename T, int kVec>
__global__ void EmbeddingKernel(const int32_t* __restrict__ ids, const T* __restrict__ table,
                                float* __restrict__ out, int64_t n, int64_t vocab, int64_t hidden) {
  for (int64_t row = blockIdx.x; row < n; row += gridDim.x) {
    const int64_t id = ids[row];
    float* dst = out + row * hidden;
    if (id < 0 || id >= vocab) {
      for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x)
        dst[j] = __int_as_float(0x7fc00000);
      continue;
    }
    const T* src = table + id * hidden;
    for (int64_t j = threadIdx.x * kVec; j < hidden; j += static_cast<int64_t>(blockDim.x) * kVec) {
      const Pack<T, kVec> in = *reinterpret_cast<const Pack<T, kVec>*>(src + j);
      Pack<float, kVec> widened;
#pragma unroll
      for (int e = 0; e < kVec; ++e) widened.v[e] = cuda_util::LoadFloat(in.v, e);
      *reinterpret_cast<Pack<float, kVec>*>(dst + j) = widened;
    }
  }
}

template <typename T, int kVec>
Status Launch(const EmbeddingArgs& args, cudaStream_t stream) {
  const int64_t n = args.ids.dim(0);
  const int64_t vocab = args.table.dim(0);
  const int64_t hidden = args.table.dim(1);
  const int64_t steps = (hidden + kVec - 1) / kVec;
  const int threads =
      static_cast<int>(std::clamp<int64_t>((steps + 31) / 32 * 32, 32, kMaxThreads));
  const unsigned blocks = static_cast<unsigned>(std::min(n, kMaxBlocks));
  EmbeddingKernel<T, kVec><<<blocks, threads, 0, stream>>>(args.ids.as<const int32_t>(),
                                                           args.table.as<const T>(),
                                                           args.out.as<float>(), n, vocab, hidden);
  MP_CUDA_CHECK_LAUNCH();
  return OkStatus();
}

}  // namespace

Status EmbeddingCuda(const EmbeddingArgs& args, cudaStream_t stream) {
  MP_RETURN_IF_ERROR(EmbeddingCheckArgs(args));
  if (args.out.NumElements() == 0) return OkStatus();
  return cuda_util::VisitFloatDType(args.table.dtype, "embedding table", [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kVec = 4;
    const bool vectorised = args.table.dim(1) % kVec == 0 &&
                            cuda_util::IsAligned(args.table.data, sizeof(T) * kVec) &&
                            cuda_util::IsAligned(args.out.data, sizeof(float) * kVec);
    return vectorised ? Launch<T, kVec>(args, stream) : Launch<T, 1>(args, stream);
  });
}

}  // namespace millipede
