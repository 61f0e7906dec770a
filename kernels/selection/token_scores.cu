#include <algorithm>
#include <cmath>
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/cuda_util.cuh"
#include "kernels/selection/token_scores_cuda.h"
#include "kernels/selection/token_scores_cuda_internal.h"

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
//   score [num_kv_heads, score_stride] (columns [0, n_k) written).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    TokenScoresKernel(const float* __restrict__ q, const T* __restrict__ k,
                      const float* __restrict__ lse, float* __restrict__ score, int64_t n_k,
                      int64_t score_stride, int64_t num_kv_heads, int64_t group, int64_t head_dim,
                      float scale) {
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
    if (lane == 0) score[g * score_stride + j] = expf(best);  // exp(-inf) = 0: no head sees a key
  }
}

// The fast path: 16-bit keys with 16-byte aligned rows of kChunks 16-byte chunks (head_dim
// 8 * kChunks: 64, 128 or 256), at most kMaxGroup query heads per KV head. A row takes kChunks
// lanes (lane part p holds columns [8p, 8p + 8) of every query head in registers, loaded once
// per block), a warp covers 32 / kChunks rows per pass, and the loads of kPasses passes are
// issued before any of them is used, so each warp keeps kPasses x 512 bytes of keys in flight.
// Blocks stride over the keys (a grid of a few waves), so the queries are not reloaded for every
// few keys. The dot products are summed over the row's lanes by xor-shuffles that stay within
// them.
constexpr int kMaxGroup = 8;
constexpr int kPasses = 8;


// The best log-probability over the group's heads of one key row from each lane's partial dot
// products `dot` (head h's over the lane's 8 columns): with kGroup a power of two (<= kChunks) the
// sums are reduce-scattered — each xor-shuffle step halves the heads a lane carries, so after
// log2(kGroup) steps lane part p holds head p / (kChunks / kGroup)'s partial sum, which the
// remaining steps complete — then the group's maximum is taken across those lanes: kGroup - 1 +
// log2(kChunks / kGroup) + log2(kGroup) shuffles instead of kGroup * log2(kChunks). kGroup 0:
// any group (<= kMaxGroup), a full sum per head. Every lane of the row gets the result.
template <int kChunks, int kGroup>
__device__ __forceinline__ float BestLogProb(float (&dot)[kMaxGroup], const float* head_lse,
                                             int group, int part, float scale) {
  if constexpr (kGroup == 0) {
    float best = -INFINITY;
#pragma unroll
    for (int h = 0; h < kMaxGroup; ++h) {
      if (h >= group) break;  // uniform over the block
      float d = dot[h];
#pragma unroll
      for (int offset = kChunks / 2; offset > 0; offset /= 2)
        d += __shfl_xor_sync(0xffffffffu, d, offset);
      const float l = head_lse[h];
      if (l != -INFINITY) best = fmaxf(best, scale * d - l);
    }
    return best;
  } else {
    static_assert((kGroup & (kGroup - 1)) == 0 && kGroup <= kChunks && kGroup <= kMaxGroup);
    int offset = kChunks / 2;
#pragma unroll
    for (int width = kGroup; width > 1; width /= 2, offset /= 2) {
      const bool upper = (part & offset) != 0;
#pragma unroll
      for (int i = 0; i < width / 2; ++i) {
        const float keep = upper ? dot[i + width / 2] : dot[i];
        const float send = upper ? dot[i] : dot[i + width / 2];
        dot[i] = keep + __shfl_xor_sync(0xffffffffu, send, offset);
      }
    }
    float d = dot[0];
#pragma unroll
    for (; offset > 0; offset /= 2) d += __shfl_xor_sync(0xffffffffu, d, offset);
    const float l = head_lse[part / (kChunks / kGroup)];
    float best = l != -INFINITY ? scale * d - l : -INFINITY;
#pragma unroll
    for (int o = kChunks / 2; o >= kChunks / kGroup; o /= 2)
      best = fmaxf(best, __shfl_xor_sync(0xffffffffu, best, o));
    return best;
  }
}

// Entry blockIdx.z of the table, KV head blockIdx.y: q, k, lse and score as RowsEntry's.
// Grid: (key blocks, num_kv_heads, entries). kGroup as in BestLogProb.
template <typename T, int kChunks, int kGroup>
__global__ void __launch_bounds__(kThreads)
    TokenScoresRowsKernel(const __grid_constant__ token_scores_internal::RowsTable table) {
  constexpr int kHeadDim = 8 * kChunks, kRowsPerPass = 32 / kChunks;
  constexpr int kRowsPerWarp = kRowsPerPass * kPasses;
  const token_scores_internal::RowsEntry& entry = table.entry[blockIdx.z];
  const T* __restrict__ k = static_cast<const T*>(entry.k);
  const int64_t n_k = entry.n_k, num_kv_heads = table.num_kv_heads;
  const int group = table.group;
  float* __restrict__ score = entry.score + blockIdx.y * table.score_stride;
  const int64_t g = blockIdx.y;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int part = lane % kChunks, sub = lane / kChunks;
  float query[kMaxGroup][8], head_lse[kMaxGroup];
#pragma unroll
  for (int h = 0; h < kMaxGroup; ++h) {
    head_lse[h] = h < group ? entry.lse[g * group + h] : -INFINITY;
#pragma unroll
    for (int e = 0; e < 8; ++e)
      query[h][e] = h < group ? entry.q[(g * group + h) * kHeadDim + 8 * part + e] : 0.0f;
  }
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarps * kRowsPerWarp;
  for (int64_t first = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * kRowsPerWarp + sub;
       first - sub < n_k; first += stride) {  // warp-uniform
    using Raw = cuda_util::Raw8<T>;           // eight elements
    Raw raw[kPasses];
#pragma unroll
    for (int u = 0; u < kPasses; ++u) {
      const int64_t j = first + u * kRowsPerPass;
      raw[u] = j < n_k
                   ? *reinterpret_cast<const Raw*>(k + (j * num_kv_heads + g) * kHeadDim + 8 * part)
                   : Raw{};
    }
#pragma unroll
    for (int u = 0; u < kPasses; ++u) {
      float key[8], dot[kMaxGroup];
      cuda_util::Widen8<T>(raw[u], key);
#pragma unroll
      for (int h = 0; h < kMaxGroup; ++h) {
        dot[h] = 0.0f;
        if (kGroup == 0 ? h >= group : h >= kGroup) continue;  // uniform over the block
#pragma unroll
        for (int e = 0; e < 8; ++e) dot[h] = fmaf(query[h][e], key[e], dot[h]);
      }
      const float best = BestLogProb<kChunks, kGroup>(dot, head_lse, group, part, table.scale);
      const int64_t j = first + u * kRowsPerPass;
      if (part == 0 && j < n_k) score[j] = expf(best);
    }
  }
}

template <typename T, int kChunks, int kGroup>
Status LaunchRowsKernel(const token_scores_internal::RowsTable& table, int entries, int64_t max_n_k,
                        cudaStream_t stream) {
  constexpr int64_t kKeys = kWarps * (32 / kChunks) * kPasses;
  // One wave of resident blocks over the entries' KV heads, each block striding over the keys.
  int device = 0, sms = 0, resident = 0;
  MP_CUDA_CHECK(cudaGetDevice(&device));
  MP_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  MP_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &resident, TokenScoresRowsKernel<T, kChunks, kGroup>, kThreads, 0));
  const int64_t wave = static_cast<int64_t>(sms) * std::max(resident, 1);
  const int64_t heads = table.num_kv_heads * entries;
  const int64_t per_head =
      std::max<int64_t>(1, std::min((max_n_k + kKeys - 1) / kKeys, (wave + heads - 1) / heads));
  const dim3 grid(static_cast<unsigned>(per_head), static_cast<unsigned>(table.num_kv_heads),
                  static_cast<unsigned>(entries));
  TokenScoresRowsKernel<T, kChunks, kGroup><<<grid, kThreads, 0, stream>>>(table);
  MP_CUDA_CHECK_LAUNCH();
  return OkStatus();
}

// The reduce-scatter instance for groups of 1, 2, 4 and 8 query heads, else the per-head one.
template <typename T, int kChunks>
Status LaunchRowsGroup(const token_scores_internal::RowsTable& table, int entries, int64_t max_n_k,
                       cudaStream_t stream) {
  switch (table.group) {
    case 1:
      return LaunchRowsKernel<T, kChunks, 1>(table, entries, max_n_k, stream);
    case 2:
      return LaunchRowsKernel<T, kChunks, 2>(table, entries, max_n_k, stream);
    case 4:
      return LaunchRowsKernel<T, kChunks, 4>(table, entries, max_n_k, stream);
    case 8:
      return LaunchRowsKernel<T, kChunks, 8>(table, entries, max_n_k, stream);
    default:
      return LaunchRowsKernel<T, kChunks, 0>(table, entries, max_n_k, stream);
  }
}

template <typename T>
Status LaunchRowsFor(const token_scores_internal::RowsTable& table, int entries, int chunks,
                     int64_t max_n_k, cudaStream_t stream) {
  switch (chunks) {
    case 8:
      return LaunchRowsGroup<T, 8>(table, entries, max_n_k, stream);
    case 16:
      return LaunchRowsGroup<T, 16>(table, entries, max_n_k, stream);
    default:
      return LaunchRowsGroup<T, 32>(table, entries, max_n_k, stream);
  }
}

}  // namespace

namespace token_scores_internal {

int RowsPathChunks(DType k_dtype, int64_t head_dim, int64_t group, bool aligned) {
  if ((k_dtype != DType::kBF16 && k_dtype != DType::kF16 && k_dtype != DType::kF8E4M3) ||
      group > kMaxGroup || !aligned)
    return 0;
  return head_dim == 64 || head_dim == 128 || head_dim == 256 ? static_cast<int>(head_dim / 8) : 0;
}

RowsTable MakeRowsTable(int64_t num_kv_heads, int64_t group, int64_t head_dim, int64_t score_stride,
                        float scale) {
  RowsTable table;
  table.num_kv_heads = num_kv_heads;
  table.score_stride = score_stride;
  table.group = static_cast<int>(group);
  table.scale =
      scale == 0.0f ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim))) : scale;
  return table;
}

Status CheckGpuLimits(int64_t head_dim, int64_t num_kv_heads, int64_t group) {
  MP_REQUIRE(head_dim <= kMaxHeadDim, "token_scores: head_dim ", head_dim, " > ", kMaxHeadDim,
             " is not supported on the GPU");
  MP_REQUIRE(num_kv_heads <= 65535, "token_scores: ", num_kv_heads, " KV heads exceed the grid");
  const size_t shared_bytes = static_cast<size_t>(group * head_dim + group) * sizeof(float);
  MP_REQUIRE(shared_bytes <= kMaxSharedBytes, "token_scores: ", group, " query heads per KV head",
             " of head_dim ", head_dim, " exceed the GPU kernel's shared memory");
  return OkStatus();
}

Status ScoreEntries(const RowsTable& table, int entries, DType k_dtype, int64_t head_dim,
                    bool aligned, cudaStream_t stream) {
  MP_ASSERT(entries >= 0 && entries <= kMaxRowsEntries, "token_scores: ", entries, " entries");
  int64_t max_n_k = 0;
  for (int e = 0; e < entries; ++e) max_n_k = std::max(max_n_k, table.entry[e].n_k);
  if (max_n_k == 0) return OkStatus();
  if (const int chunks = RowsPathChunks(k_dtype, head_dim, table.group, aligned); chunks > 0) {
    switch (k_dtype) {
      case DType::kBF16:
        return LaunchRowsFor<__nv_bfloat16>(table, entries, chunks, max_n_k, stream);
      case DType::kF8E4M3:
        return LaunchRowsFor<__nv_fp8_e4m3>(table, entries, chunks, max_n_k, stream);
      default:
        return LaunchRowsFor<__half>(table, entries, chunks, max_n_k, stream);
    }
  }
  const int64_t group = table.group;
  const size_t shared_bytes = static_cast<size_t>(group * head_dim + group) * sizeof(float);
  return cuda_util::VisitKvDType(k_dtype, "token_scores k", [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    for (int e = 0; e < entries; ++e) {
      const RowsEntry& entry = table.entry[e];
      if (entry.n_k == 0) continue;
      const dim3 grid(static_cast<unsigned>((entry.n_k + kKeysPerBlock - 1) / kKeysPerBlock),
                      static_cast<unsigned>(table.num_kv_heads));
      TokenScoresKernel<T><<<grid, kThreads, shared_bytes, stream>>>(
          entry.q, static_cast<const T*>(entry.k), entry.lse, entry.score, entry.n_k,
          table.score_stride, table.num_kv_heads, group, head_dim, table.scale);
      MP_CUDA_CHECK_LAUNCH();
    }
    return OkStatus();
  });
}

}  // namespace token_scores_internal

Status TokenScoresCuda(const TokenScoresArgs& args, cudaStream_t stream) {
  MP_RETURN_IF_ERROR(TokenScoresCheckArgs(args));
  const int64_t num_heads = args.q.dim(0), head_dim = args.q.dim(1);
  const int64_t n_k = args.k.dim(0), num_kv_heads = args.k.dim(1);
  const int64_t group = num_heads / num_kv_heads;
  MP_RETURN_IF_ERROR(token_scores_internal::CheckGpuLimits(head_dim, num_kv_heads, group));
  token_scores_internal::RowsTable table =
      token_scores_internal::MakeRowsTable(num_kv_heads, group, head_dim, n_k, args.scale);
  table.entry[0] = {args.k.data, args.q.as<const float>(), args.lse.as<const float>(),
                    args.score.as<float>(), n_k};
  return token_scores_internal::ScoreEntries(table, 1, args.k.dtype, head_dim,
                                             cuda_util::IsAligned(args.k.data, 16), stream);
}

}  // namespace millipede
