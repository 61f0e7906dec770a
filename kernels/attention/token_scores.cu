#include <cmath>
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/attention/token_scores_cuda.h"
#include "kernels/cuda_util.cuh"

namespace millipede {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kKeysPerWarp = 8;
constexpr int kKeysPerBlock = kWarps * kKeysPerWarp;
constexpr int kMaxHeadDim = 256;
constexpr int kPerLane = kMaxHeadDim / 32;
constexpr size_t kMaxSharedBytes = 48 * 1024;

// One block per (64 keys, KV head g); the group's queries and LSEs sit in shared memory. Warp w
// takes keys w * 8 .. w * 8 + 7 of the block: its lanes hold one key row (lane l: columns l,
// l + 32, ...), dot it with every query head of the group (a warp sum per head) and keep the
// largest log-probability; lane 0 writes its exp.
//   q [num_heads, head_dim], k [n_k, num_kv_heads, head_dim], lse [num_heads],
//   score [num_kv_heads, n_k].
template <typename T>
__global__ void __launch_bounds__(kThreads)
    TokenScoresKernel(const float* __restrict__ q, const T* __restrict__ k,
                      const float* __restrict__ lse, float* __restrict__ score, int64_t n_k,
                      int64_t num_kv_heads, int64_t group, int64_t head_dim, float scale) {
  extern __shared__ float shared[];
  float* queries = shared;                      // [group, head_dim]
  float* head_lse = shared + group * head_dim;  // [group]
  const int64_t g = blockIdx.y;
  for (int64_t e = threadIdx.x; e < group * head_dim; e += kThreads)
    queries[e] = q[g * group * head_dim + e];
  for (int64_t h = threadIdx.x; h < group; h += kThreads) head_lse[h] = lse[g * group + h];
  __syncthreads();

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kKeysPerBlock + warp * kKeysPerWarp;
  const int64_t last = min(first + kKeysPerWarp, n_k);
  for (int64_t j = first; j < last; ++j) {  // warp-uniform: the shuffles below see every lane
    const T* row = k + (j * num_kv_heads + g) * head_dim;
    float key[kPerLane];
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int64_t c = lane + 32 * i;
      key[i] = c < head_dim ? cuda_util::LoadFloat(row, c) : 0.0f;
    }
    float best = -INFINITY;
    for (int64_t h = 0; h < group; ++h) {
      const float* qv = queries + h * head_dim;
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int64_t c = lane + 32 * i;
        if (c < head_dim) dot = fmaf(qv[c], key[i], dot);
      }
      for (int offset = 16; offset > 0; offset /= 2)
        dot += __shfl_xor_sync(0xffffffffu, dot, offset);
      const float l = head_lse[h];
      if (l != -INFINITY) best = fmaxf(best, scale * dot - l);
    }
    if (lane == 0) score[g * n_k + j] = expf(best);  // exp(-inf) = 0: no head sees a key
  }
}

}  // namespace

Status TokenScoresCuda(const TokenScoresArgs& args, cudaStream_t stream) {
  MP_RETURN_IF_ERROR(TokenScoresCheckArgs(args));
  const int64_t num_heads = args.q.dim(0), head_dim = args.q.dim(1);
  const int64_t n_k = args.k.dim(0), num_kv_heads = args.k.dim(1);
  const int64_t group = num_heads / num_kv_heads;
  MP_REQUIRE(head_dim <= kMaxHeadDim, "token_scores: head_dim ", head_dim, " > ", kMaxHeadDim,
             " is not supported on the GPU");
  MP_REQUIRE(num_kv_heads <= 65535, "token_scores: ", num_kv_heads, " KV heads exceed the grid");
  const size_t shared_bytes = static_cast<size_t>(group * head_dim + group) * sizeof(float);
  MP_REQUIRE(shared_bytes <= kMaxSharedBytes, "token_scores: ", group, " query heads per KV head",
             " of head_dim ", head_dim, " exceed the GPU kernel's shared memory");
  if (n_k == 0) return OkStatus();
  const float scale = args.scale == 0.0f
                          ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)))
                          : args.scale;
  const dim3 grid(static_cast<unsigned>((n_k + kKeysPerBlock - 1) / kKeysPerBlock),
                  static_cast<unsigned>(num_kv_heads));
  return cuda_util::VisitFloatDType(args.k.dtype, "token_scores k", [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    TokenScoresKernel<T><<<grid, kThreads, shared_bytes, stream>>>(
        args.q.as<const float>(), args.k.as<const T>(), args.lse.as<const float>(),
        args.score.as<float>(), n_k, num_kv_heads, group, head_dim, scale);
    MP_CUDA_CHECK_LAUNCH();
    return OkStatus();
  });
}

}  // namespace millipede
