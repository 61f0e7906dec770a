#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "common/cuda_check.h"
#include "kernels/cuda_util.cuh"
#include "kernels/selection/key_scores_cuda.h"
#include "kernels/selection/key_scores_mma_kernel.cuh"

namespace millipede {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kKeys = 32;  // keys per block: one per lane
constexpr int kMaxHeadDim = 256;
// Diagonal sums of a block are gathered in shared memory when its diagonals span at most this
// many (keys and queries at consecutive positions: 32 + n_q - 1), else added to global memory.
constexpr int kDiagShared = 1024;

// The diagonals this block's terms can fall on, [diag_lo, diag_hi] (clipped to [0, n_diag)):
// q_pos - k_pos over every query and the block's keys. Returns whether they fit kDiagShared, in
// which case `diag_shared` is zeroed for them. Called by every thread of the block.
__device__ bool DiagonalSpan(const int64_t* q_pos, int64_t n_q, const int64_t* k_pos, int64_t key0,
                             int64_t n_k, int64_t n_diag, float* diag_shared, long long* diag_lo,
                             long long* diag_hi) {
  __shared__ long long q_min, q_max, k_min, k_max;
  if (threadIdx.x == 0) {
    q_min = k_min = LLONG_MAX;
    q_max = k_max = LLONG_MIN;
  }
  __syncthreads();
  for (int64_t t = threadIdx.x; t < n_q; t += kThreads) {
    atomicMin(&q_min, static_cast<long long>(q_pos[t]));
    atomicMax(&q_max, static_cast<long long>(q_pos[t]));
  }
  if (threadIdx.x < kKeys && key0 + threadIdx.x < n_k) {
    atomicMin(&k_min, static_cast<long long>(k_pos[key0 + threadIdx.x]));
    atomicMax(&k_max, static_cast<long long>(k_pos[key0 + threadIdx.x]));
  }
  __syncthreads();
  // No query or no key: an empty span (the loop below adds nothing either).
  const long long lo = q_min == LLONG_MAX || k_max == LLONG_MIN ? 0 : max(0ll, q_min - k_max);
  const long long hi = q_max == LLONG_MIN || k_min == LLONG_MAX
                           ? -1
                           : min(static_cast<long long>(n_diag) - 1, q_max - k_min);
  const bool fits = hi - lo + 1 <= kDiagShared;
  if (fits)
    for (long long i = threadIdx.x; i <= hi - lo; i += kThreads) diag_shared[i] = 0.0f;
  if (threadIdx.x == 0) {
    *diag_lo = lo;
    *diag_hi = hi;
  }
  __syncthreads();
  return fits;
}

// One block per (32 keys, KV head g). The keys sit in shared memory as floats (rows padded by
// one float, so the 32 lanes reading one column of 32 rows hit 32 banks); the (query, head)
// rows of g are streamed through shared memory 8 at a time, warp w taking row w of each batch:
// lane l adds exp(scale * q.k_l - lse) for key l. The warps' partial sums are added at the end.
// With diag_score, each term is also added to its diagonal q_pos - k_pos (if below n_diag).
//   q [n_q, num_heads, head_dim], q_pos [n_q], k [n_k, num_kv_heads, head_dim], k_pos [n_k],
//   lse [n_q, num_heads], score [num_kv_heads, n_k], diag_score [num_kv_heads, n_diag] (zeroed).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    KeyScoresKernel(const float* __restrict__ q, const int64_t* __restrict__ q_pos,
                    const T* __restrict__ k, const int64_t* __restrict__ k_pos,
                    const float* __restrict__ lse, float* __restrict__ score,
                    float* __restrict__ diag_score, int64_t n_diag, int64_t n_q, int64_t num_heads,
                    int64_t n_k, int64_t num_kv_heads, int64_t head_dim, float scale) {
  extern __shared__ float shared[];
  const int64_t pitch = head_dim + 1;
  float* keys = shared;                   // [kKeys, pitch]
  float* queries = keys + kKeys * pitch;  // [kWarps, head_dim]
  __shared__ float row_lse[kWarps];
  __shared__ int64_t row_pos[kWarps];
  __shared__ float partial[kWarps][kKeys];
  float* diag_shared = queries + kWarps * head_dim;  // [kDiagShared] with diag_score
  __shared__ long long diag_lo, diag_hi;

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
  const bool diag_in_shared =
      diag_score != nullptr &&
      DiagonalSpan(q_pos, n_q, k_pos, key0, n_k, n_diag, diag_shared, &diag_lo, &diag_hi);

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
    const float p = expf(scale * dot - l);
    acc += p;
    const int64_t d = row_pos[warp] - my_pos;
    if (diag_score != nullptr && d < n_diag)
      atomicAdd(diag_in_shared ? &diag_shared[d - diag_lo] : &diag_score[g * n_diag + d], p);
  }
  partial[warp][lane] = acc;
  __syncthreads();
  if (diag_in_shared)
    for (int64_t i = threadIdx.x; i <= diag_hi - diag_lo; i += kThreads)
      if (diag_shared[i] != 0.0f) atomicAdd(&diag_score[g * n_diag + diag_lo + i], diag_shared[i]);
  if (warp == 0 && key < n_k) {
    float sum = 0.0f;
    for (int w = 0; w < kWarps; ++w) sum += partial[w][lane];
    score[g * n_k + key] = sum;
  }
}

// The tensor-core kernel for BF16 / F16 keys: one block per resident slot (shared memory allows
// one per SM), each taking an equal share of the (KV head, key tile) pairs.
template <typename T, int kHeadDim>
Status LaunchMma(const KeyScoresArgs& args, float scale, bool diag, cudaStream_t stream) {
  using key_scores_internal::KeyScoresMmaParams;
  using key_scores_internal::kMmaThreads;
  using Shape = key_scores_internal::KeyScoresMmaShape<kHeadDim>;
  const auto kernel = key_scores_internal::KeyScoresMmaKernel<T, kHeadDim>;
  MP_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     Shape::kSharedBytes));
  int device = 0, sms = 0, per_sm = 0;
  MP_CUDA_CHECK(cudaGetDevice(&device));
  MP_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  MP_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kMmaThreads,
                                                              Shape::kSharedBytes));
  const int64_t n_k = args.k.dim(0), num_kv_heads = args.k.dim(1);
  const int64_t pairs =
      (n_k + key_scores_internal::kTileKeys - 1) / key_scores_internal::kTileKeys * num_kv_heads;
  const int64_t grid = std::min<int64_t>(pairs, int64_t{sms} * std::max(per_sm, 1));
  const KeyScoresMmaParams p{args.q.as<const float>(),
                             args.q_pos.as<const int64_t>(),
                             args.k.data,
                             args.k_pos.as<const int64_t>(),
                             args.lse.as<const float>(),
                             args.score.as<float>(),
                             diag ? args.diag_score.as<float>() : nullptr,
                             diag ? args.diag_score.dim(1) : 0,
                             args.q.dim(0),
                             args.q.dim(1),
                             n_k,
                             num_kv_heads,
                             args.q.dim(1) / num_kv_heads,
                             scale * key_scores_internal::kLog2e,
                             cuda_util::IsAligned(args.k.data, 16)};
  kernel<<<static_cast<unsigned>(grid), kMmaThreads, Shape::kSharedBytes, stream>>>(p);
  MP_CUDA_CHECK_LAUNCH();
  return OkStatus();
}

// Runs the tensor-core kernel when it serves the shapes and dtype; false: the caller runs the
// CUDA-core one.
StatusOr<bool> TryMma(const KeyScoresArgs& args, float scale, bool diag, cudaStream_t stream) {
  const int64_t head_dim = args.q.dim(2);
  const bool served = (args.k.dtype == DType::kBF16 || args.k.dtype == DType::kF16) &&
                      (head_dim == 64 || head_dim == 128 || head_dim == 256) && args.q.dim(0) > 0 &&
                      cuda_util::IsAligned(args.k.data, 2);
  if (!served) return false;
  const auto launch = [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    if (head_dim == 64) return LaunchMma<T, 64>(args, scale, diag, stream);
    if (head_dim == 128) return LaunchMma<T, 128>(args, scale, diag, stream);
    return LaunchMma<T, 256>(args, scale, diag, stream);
  };
  MP_RETURN_IF_ERROR(args.k.dtype == DType::kBF16 ? launch(std::type_identity<__nv_bfloat16>{})
                                                  : launch(std::type_identity<__half>{}));
  return true;
}

}  // namespace

Status KeyScoresCuda(const KeyScoresArgs& args, cudaStream_t stream) {
  MP_RETURN_IF_ERROR(KeyScoresCheckArgs(args));
  const int64_t n_q = args.q.dim(0), num_heads = args.q.dim(1), head_dim = args.q.dim(2);
  const int64_t n_k = args.k.dim(0), num_kv_heads = args.k.dim(1);
  MP_REQUIRE(head_dim <= kMaxHeadDim, "key_scores: head_dim ", head_dim, " > ", kMaxHeadDim,
             " is not supported on the GPU");
  MP_REQUIRE(num_kv_heads <= 65535, "key_scores: ", num_kv_heads, " KV heads exceed the grid");
  const bool diag = args.diag_score.data != nullptr && args.diag_score.dim(1) > 0;
  if (diag)
    MP_CUDA_CHECK(cudaMemsetAsync(args.diag_score.data, 0, args.diag_score.NumBytes(), stream));
  if (n_k == 0) return OkStatus();
  const float scale = args.scale == 0.0f
                          ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)))
                          : args.scale;
  MP_ASSIGN_OR_RETURN(const bool done, TryMma(args, scale, diag, stream));
  if (done) return OkStatus();
  const dim3 grid(static_cast<unsigned>((n_k + kKeys - 1) / kKeys),
                  static_cast<unsigned>(num_kv_heads));
  const size_t shared_bytes =
      (kKeys * (head_dim + 1) + kWarps * head_dim + (diag ? kDiagShared : 0)) * sizeof(float);
  return cuda_util::VisitKvDType(args.k.dtype, "key_scores k", [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    KeyScoresKernel<T><<<grid, kThreads, shared_bytes, stream>>>(
        args.q.as<const float>(), args.q_pos.as<const int64_t>(), args.k.as<const T>(),
        args.k_pos.as<const int64_t>(), args.lse.as<const float>(), args.score.as<float>(),
        diag ? args.diag_score.as<float>() : nullptr, diag ? args.diag_score.dim(1) : 0, n_q,
        num_heads, n_k, num_kv_heads, head_dim, scale);
    MP_CUDA_CHECK_LAUNCH();
    return OkStatus();
  });
}

}  // namespace millipede
