#include <algorithm>
#include <cmath>
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/attention/key_scores_cuda.h"
#include "kernels/cuda_util.cuh"

namespace millipede {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kKeys = 32;  // keys per block: one per lane
constexpr int kMaxHeadDim = 256;

// One block per (32 keys, KV head g). The keys sit in shared memory as floats (rows padded by
// one float, so the 32 lanes reading one column of 32 rows hit 32 banks); the (query, head)
// rows of g are streamed through shared memory 8 at a time, warp w taking row w of each batch:
// lane l adds exp(scale * q.k_l - lse) for key l. The warps' partial sums are added at the end.
//   q [n_q, num_heads, head_dim], q_pos [n_q], k [n_k, num_kv_heads, head_dim], k_pos [n_k],
//   lse [n_q, num_heads], score [num_kv_heads, n_k].
template <typename T>
__global__ void __launch_bounds__(kThreads)
    KeyScoresKernel(const float* __restrict__ q, const int64_t* __restrict__ q_pos,
                    const T* __restrict__ k, const int64_t* __restrict__ k_pos,
                    const float* __restrict__ lse, float* __restrict__ score, int64_t n_q,
                    int64_t num_heads, int64_t n_k, int64_t num_kv_heads, int64_t head_dim,
                    float scale) {
  extern __shared__ float shared[];
  const int64_t pitch = head_dim + 1;
  float* keys = shared;                   // [kKeys, pitch]
  float* queries = keys + kKeys * pitch;  // [kWarps, head_dim]
  __shared__ float row_lse[kWarps];
  __shared__ int64_t row_pos[kWarps];
  __shared__ float partial[kWarps][kKeys];

  const int64_t g = blockIdx.y, group = num_heads / num_kv_heads;
  const int64_t key0 = static_cast<int64_t>(blockIdx.x) * kKeys;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int64_t e = threadIdx.x; e < kKeys * head_dim; e += kThreads) {
    const int64_t j = e / head_dim, c = e - j * head_dim;
    keys[j * pitch + c] =
        key0 + j < n_k ? cuda_util::LoadFloat(k, ((key0 + j) * num_kv_heads + g) * head_dim + c)
                       : 0.0f;
  }
  const int64_t key = key0 + lane;
  const int64_t my_pos = key < n_k ? k_pos[key] : 0;
  float acc = 0.0f;

  const int64_t rows = n_q * group;  // row r: query t = r / group, head g * group + r % group
  for (int64_t r0 = 0; r0 < rows; r0 += kWarps) {
    __syncthreads();  // the previous batch is consumed (and, first time, the keys are loaded)
    for (int64_t e = threadIdx.x; e < kWarps * head_dim; e += kThreads) {
      const int64_t w = e / head_dim, c = e - w * head_dim, r = r0 + w;
      const int64_t t = r / group, h = g * group + r % group;
      queries[e] = r < rows ? q[(t * num_heads + h) * head_dim + c] : 0.0f;
    }
    if (threadIdx.x < kWarps) {
      const int64_t r = r0 + threadIdx.x, t = r / group, h = g * group + r % group;
      row_lse[threadIdx.x] = r < rows ? lse[t * num_heads + h] : -INFINITY;
      row_pos[threadIdx.x] = r < rows ? q_pos[t] : 0;
    }
    __syncthreads();
    const float l = row_lse[warp];
    if (l == -INFINITY || key >= n_k || my_pos > row_pos[warp]) continue;
    const float* qv = queries + warp * head_dim;
    const float* kv = keys + lane * pitch;
    float dot = 0.0f;
    for (int64_t c = 0; c < head_dim; ++c) dot = fmaf(qv[c], kv[c], dot);
    acc += expf(scale * dot - l);
  }
  partial[warp][lane] = acc;
  __syncthreads();
  if (warp == 0 && key < n_k) {
    float sum = 0.0f;
    for (int w = 0; w < kWarps; ++w) sum += partial[w][lane];
    score[g * n_k + key] = sum;
  }
}

}  // namespace

Status KeyScoresCuda(const KeyScoresArgs& args, cudaStream_t stream) {
  MP_RETURN_IF_ERROR(KeyScoresCheckArgs(args));
  const int64_t n_q = args.q.dim(0), num_heads = args.q.dim(1), head_dim = args.q.dim(2);
  const int64_t n_k = args.k.dim(0), num_kv_heads = args.k.dim(1);
  MP_REQUIRE(head_dim <= kMaxHeadDim, "key_scores: head_dim ", head_dim, " > ", kMaxHeadDim,
             " is not supported on the GPU");
  MP_REQUIRE(num_kv_heads <= 65535, "key_scores: ", num_kv_heads, " KV heads exceed the grid");
  if (args.diag_score.data != nullptr)
    return UnimplementedError("key_scores: diagonal scores are not available on the GPU yet");
  if (n_k == 0) return OkStatus();
  const float scale = args.scale == 0.0f
                          ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)))
                          : args.scale;
  const dim3 grid(static_cast<unsigned>((n_k + kKeys - 1) / kKeys),
                  static_cast<unsigned>(num_kv_heads));
  const size_t shared_bytes = (kKeys * (head_dim + 1) + kWarps * head_dim) * sizeof(float);
  return cuda_util::VisitFloatDType(args.k.dtype, "key_scores k", [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    KeyScoresKernel<T><<<grid, kThreads, shared_bytes, stream>>>(
        args.q.as<const float>(), args.q_pos.as<const int64_t>(), args.k.as<const T>(),
        args.k_pos.as<const int64_t>(), args.lse.as<const float>(), args.score.as<float>(), n_q,
        num_heads, n_k, num_kv_heads, head_dim, scale);
    MP_CUDA_CHECK_LAUNCH();
    return OkStatus();
  });
}

}  // namespace millipede
