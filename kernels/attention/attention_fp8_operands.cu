// Fp8AttentionOperandsCuda: K quantised per 128-key block (one thread block each), V's channel
// maxima (atomic over blocks), then V quantised and transposed through shared memory.
#include <cuda_runtime.h>

#include <cstdint>

#include "common/cuda_check.h"
#include "common/fp8.h"
#include "kernels/attention/attention_fp8_operands_cuda.h"
#include "kernels/cuda_util.cuh"

namespace millipede {
namespace {

using cuda_util::LoadFloat;

constexpr int kThreads = 256;
constexpr int kBlockKeys = static_cast<int>(kFp8AttentionKeyBlock);
constexpr int kMaxHeadDim = 256;

__device__ __forceinline__ float ScaleOf(float amax) {
  return amax > 0.0f ? __fdiv_rn(amax, kFp8AttentionMax) : 1.0f;
}

// The largest value over the thread block (every thread gets it).
__device__ float BlockMax(float x) {
  __shared__ float partial[kThreads / 32];
  for (int o = 16; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = x;
  __syncthreads();
  x = partial[0];
  for (int w = 1; w < kThreads / 32; ++w) x = fmaxf(x, partial[w]);
  return x;
}

struct Dims {
  int64_t n_kv, num_kv_heads, head_dim, blocks, padded;
};

// Grid (key blocks, KV heads): the block's K values in E4M3 and its scale.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    QuantizeKKernel(const T* k, uint8_t* k8, float* k_scale, Dims dims) {
  const int64_t b = blockIdx.x, g = blockIdx.y, d_count = dims.head_dim;
  const int64_t j0 = b * kBlockKeys;
  const int64_t count = min(static_cast<int64_t>(kBlockKeys), dims.n_kv - j0) * d_count;
  auto index = [&](int64_t i) {
    return ((j0 + i / d_count) * dims.num_kv_heads + g) * d_count + i % d_count;
  };
  float amax = 0.0f;
  for (int64_t i = threadIdx.x; i < count; i += kThreads)
    amax = fmaxf(amax, fabsf(LoadFloat(k, index(i))));
  const float scale = ScaleOf(BlockMax(amax));
  const float inv = __fdiv_rn(1.0f, scale);
  for (int64_t i = threadIdx.x; i < count; i += kThreads) {
    const int64_t at = index(i);
    k8[at] = FloatToE4M3Bits(__fmul_rn(LoadFloat(k, at), inv));
  }
  if (threadIdx.x == 0) k_scale[g * dims.blocks + b] = scale;
}

// Grid (key blocks, KV heads): each channel's largest |v| over the block, folded into
// amax_bits[g, d] (float bits of non-negative values order as unsigned integers).
template <typename T>
__global__ void __launch_bounds__(kThreads) VMaxKernel(const T* v, uint32_t* amax_bits, Dims dims) {
  const int64_t b = blockIdx.x, g = blockIdx.y;
  const int64_t j0 = b * kBlockKeys, j1 = min(j0 + kBlockKeys, dims.n_kv);
  for (int64_t d = threadIdx.x; d < dims.head_dim; d += kThreads) {
    float amax = 0.0f;
    for (int64_t j = j0; j < j1; ++j)
      amax = fmaxf(amax, fabsf(LoadFloat(v, (j * dims.num_kv_heads + g) * dims.head_dim + d)));
    atomicMax(amax_bits + g * dims.head_dim + d, __float_as_uint(amax));
  }
}

__global__ void VScaleKernel(float* v_scale, int64_t count) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < count) v_scale[i] = ScaleOf(v_scale[i]);  // the maximum's bits, read as a float
}

// Column (within a 16-key group) of key k: the inverse of Fp8VColumnKey.
__device__ __forceinline__ int ColumnOfKey(int k) {
  return 4 * ((k % 8) / 2) + 2 * (k / 8) + k % 2;
}

// Grid (key blocks, KV heads): the block's V in E4M3, transposed through shared memory
// ([head_dim][128 keys] bytes) into v8t's rows, keys permuted per 16, zeros past n_kv.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    QuantizeVKernel(const T* v, const float* v_scale, uint8_t* v8t, Dims dims) {
  __shared__ __align__(16) uint8_t tile[kMaxHeadDim * kBlockKeys];
  __shared__ float inv[kMaxHeadDim];
  const int64_t b = blockIdx.x, g = blockIdx.y, d_count = dims.head_dim;
  const int64_t j0 = b * kBlockKeys;
  for (int64_t d = threadIdx.x; d < d_count; d += kThreads)
    inv[d] = __fdiv_rn(1.0f, v_scale[g * d_count + d]);
  __syncthreads();
  for (int64_t i = threadIdx.x; i < kBlockKeys * d_count; i += kThreads) {
    const int key = static_cast<int>(i / d_count), d = static_cast<int>(i % d_count);
    const int64_t j = j0 + key;
    const uint8_t q = j < dims.n_kv
                          ? FloatToE4M3Bits(__fmul_rn(
                                LoadFloat(v, (j * dims.num_kv_heads + g) * d_count + d), inv[d]))
                          : uint8_t{0};
    tile[d * kBlockKeys + key / 16 * 16 + ColumnOfKey(key % 16)] = q;
  }
  __syncthreads();
  constexpr int kChunks = kBlockKeys / 16;  // 16-byte chunks per row
  for (int64_t i = threadIdx.x; i < d_count * kChunks; i += kThreads) {
    const int64_t d = i / kChunks, c = i % kChunks;
    *reinterpret_cast<uint4*>(v8t + (g * d_count + d) * dims.padded + j0 + 16 * c) =
        *reinterpret_cast<const uint4*>(tile + d * kBlockKeys + 16 * c);
  }
}

}  // namespace

Status Fp8AttentionOperandsCuda(const Fp8AttentionOperandsArgs& args, cudaStream_t stream) {
  MP_RETURN_IF_ERROR(Fp8AttentionOperandsCheckArgs(args));
  const Dims dims{args.k.dim(0), args.k.dim(1), args.k.dim(2), Fp8AttentionKeyBlocks(args.k.dim(0)),
                  Fp8AttentionPaddedKeys(args.k.dim(0))};
  if (dims.head_dim > kMaxHeadDim || dims.head_dim % 16 != 0)
    return UnimplementedError(detail::StrCat("fp8 attention operands on the GPU: head_dim ",
                                             dims.head_dim, " (a multiple of 16 up to ",
                                             kMaxHeadDim, " is)"));
  MP_REQUIRE(dims.num_kv_heads < 65536, "fp8 attention operands: too many KV heads");
  if (dims.n_kv == 0) return OkStatus();
  MP_REQUIRE(dims.blocks < (int64_t{1} << 31), "fp8 attention operands: ", dims.n_kv,
             " keys is too many");
  const dim3 grid(static_cast<unsigned>(dims.blocks), static_cast<unsigned>(dims.num_kv_heads));
  float* const v_scale = args.v_scale.as<float>();
  const int64_t channels = dims.num_kv_heads * dims.head_dim;
  MP_CUDA_CHECK(cudaMemsetAsync(v_scale, 0, channels * sizeof(float), stream));
  MP_RETURN_IF_ERROR(cuda_util::VisitFloatDType(
      args.k.dtype, "fp8 attention operands k", [&]<typename T>(std::type_identity<T>) {
        QuantizeKKernel<T><<<grid, kThreads, 0, stream>>>(args.k.as<const T>(),
                                                          static_cast<uint8_t*>(args.k8.data),
                                                          args.k_scale.as<float>(), dims);
        MP_CUDA_CHECK_LAUNCH();
        return OkStatus();
      }));
  return cuda_util::VisitFloatDType(
      args.v.dtype, "fp8 attention operands v", [&]<typename T>(std::type_identity<T>) {
        VMaxKernel<T><<<grid, kThreads, 0, stream>>>(args.v.as<const T>(),
                                                     reinterpret_cast<uint32_t*>(v_scale), dims);
        MP_CUDA_CHECK_LAUNCH();
        VScaleKernel<<<static_cast<unsigned>((channels + 255) / 256), 256, 0, stream>>>(v_scale,
                                                                                        channels);
        MP_CUDA_CHECK_LAUNCH();
        QuantizeVKernel<T><<<grid, kThreads, 0, stream>>>(
            args.v.as<const T>(), v_scale, static_cast<uint8_t*>(args.v8t.data), dims);
        MP_CUDA_CHECK_LAUNCH();
        return OkStatus();
      });
}

}  // namespace millipede
