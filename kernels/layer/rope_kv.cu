#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "common/cuda_check.h"
#include "kernels/cuda_util.cuh"
#include "kernels/layer/rope.cuh"
#include "kernels/layer/rope_kv_cuda.h"

namespace millipede {
namespace {

constexpr int kMaxThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 20;
// Blocks a launch of few rows aims at (a decode step's tokens).
constexpr int64_t kTargetBlocks = 48;

// The stores round to nearest even, as ConvertCuda's do (F8E4M3 as common/fp8.h does).
using cuda_util::StoreFloat;

// A row's units: its q_heads query heads, then its kv_heads key heads, then its kv_heads value
// heads. A row is split over `slices` blocks (blockIdx.y) of consecutive units, so that a few
// decode tokens still spread over many multiprocessors.
struct RowSlice {
  int64_t begin, end;  // units [begin, end)
};
__device__ __forceinline__ RowSlice SliceOfRow(int64_t units, int64_t slices) {
  const int64_t per = (units + slices - 1) / slices;
  const int64_t begin = min(units, static_cast<int64_t>(blockIdx.y) * per);
  return {begin, min(units, begin + per)};
}

// Row t's units in `slice`: the row's cos/sin table in shared memory (2 * half floats), then the
// query pairs rotated in place, the key pairs rotated into k_out and the values copied into v_out
// (neither when k_out is null). Ends with the block synchronised, the table free for the next row.
template <typename K, typename V>
__device__ __forceinline__ void RopeKvRow(float* __restrict__ q_row,
                                          const float* __restrict__ k_row,
                                          const float* __restrict__ v_row, int64_t position,
                                          const float* __restrict__ inv_freq, K* __restrict__ k_out,
                                          V* __restrict__ v_out, int64_t q_heads, int64_t kv_heads,
                                          int64_t half, RowSlice slice, float* cos_t,
                                          float* sin_t) {
  const int64_t head_dim = 2 * half;
  auto clip = [&](int64_t first, int64_t count, int64_t u) {
    return min(max(u - first, int64_t{0}), count);
  };
  const int64_t q0 = clip(0, q_heads, slice.begin), q1 = clip(0, q_heads, slice.end);
  const int64_t k0 = clip(q_heads, kv_heads, slice.begin), k1 = clip(q_heads, kv_heads, slice.end);
  const int64_t v0 = clip(q_heads + kv_heads, kv_heads, slice.begin);
  const int64_t v1 = clip(q_heads + kv_heads, kv_heads, slice.end);
  rope_cuda::FillTable(position, inv_freq, half, cos_t, sin_t);
  __syncthreads();
  for (int64_t p = q0 * half + threadIdx.x; p < q1 * half; p += blockDim.x) {
    const int64_t h = p / half, i = p - h * half;
    float* head = q_row + h * head_dim;
    rope_cuda::RotatePair(head, i, half, cos_t, sin_t, &head[i], &head[i + half]);
  }
  if (k_out != nullptr) {
    for (int64_t p = k0 * half + threadIdx.x; p < k1 * half; p += blockDim.x) {
      const int64_t h = p / half, i = p - h * half;
      float y1, y2;
      rope_cuda::RotatePair(k_row + h * head_dim, i, half, cos_t, sin_t, &y1, &y2);
      StoreFloat(k_out, h * head_dim + i, y1);
      StoreFloat(k_out, h * head_dim + i + half, y2);
    }
    for (int64_t e = v0 * head_dim + threadIdx.x; e < v1 * head_dim; e += blockDim.x)
      StoreFloat(v_out, e, v_row[e]);
  }
  // The table is rewritten for the next row.
  __syncthreads();
}

// Blocks (x, slice) per row t (x grid-strided over the rows), as RopeKernel.
//   q [n, q_heads, 2 * half]; k, v [n, kv_heads, 2 * half]; positions [n]; inv_freq [half];
//   k_cache [n, kv_heads, 2 * half] of K; v_cache likewise of V.
template <typename K, typename V>
__global__ void RopeKvKernel(float* __restrict__ q, const float* __restrict__ k,
                             const float* __restrict__ v, const int64_t* __restrict__ positions,
                             const float* __restrict__ inv_freq, K* __restrict__ k_cache,
                             V* __restrict__ v_cache, int64_t n, int64_t q_heads, int64_t kv_heads,
                             int64_t half) {
  extern __shared__ float table[];
  const int64_t kv_row = kv_heads * 2 * half;
  const RowSlice slice = SliceOfRow(q_heads + 2 * kv_heads, gridDim.y);
  for (int64_t t = blockIdx.x; t < n; t += gridDim.x)
    RopeKvRow(q + t * q_heads * 2 * half, k + t * kv_row, v + t * kv_row, positions[t], inv_freq,
              k_cache + t * kv_row, v_cache + t * kv_row, q_heads, kv_heads, half, slice, table,
              table + half);
}

// The destinations of up to kMaxRows rows, passed in the launch's parameters (3 KiB). With
// cache_rows (device memory, [kMaxRows] from the launch's first row) each destination is a whole
// cache of cache_size[t] rows and row t goes to its row cache_rows[t].
struct RowDestinations {
  static constexpr int kMaxRows = 128;
  void* k[kMaxRows];
  void* v[kMaxRows];
  int64_t cache_size[kMaxRows];
  const int64_t* cache_rows;
};

// Blocks (t, slice) per row t < n <= kMaxRows, its K/V to dst.k[t] / dst.v[t] (none when null,
// or when its cache row lies outside the cache).
template <typename K, typename V>
__global__ void RopeKvRowsKernel(float* __restrict__ q, const float* __restrict__ k,
                                 const float* __restrict__ v,
                                 const int64_t* __restrict__ positions,
                                 const float* __restrict__ inv_freq,
                                 const __grid_constant__ RowDestinations dst, int64_t q_heads,
                                 int64_t kv_heads, int64_t half) {
  extern __shared__ float table[];
  const int64_t t = blockIdx.x, kv_row = kv_heads * 2 * half;
  K* k_out = static_cast<K*>(dst.k[t]);
  V* v_out = static_cast<V*>(dst.v[t]);
  if (dst.cache_rows != nullptr && k_out != nullptr) {
    const int64_t r = dst.cache_rows[t];
    const bool inside = r >= 0 && r < dst.cache_size[t];
    k_out = inside ? k_out + r * kv_row : nullptr;
    v_out = inside ? v_out + r * kv_row : nullptr;
  }
  RopeKvRow(q + t * q_heads * 2 * half, k + t * kv_row, v + t * kv_row, positions[t], inv_freq,
            k_out, v_out, q_heads, kv_heads, half, SliceOfRow(q_heads + 2 * kv_heads, gridDim.y),
            table, table + half);
}

// The storage type of a cache dtype (RopeKvCheckArgs allows F32, BF16, F16 and F8E4M3).
template <typename F>
Status VisitCacheDType(DType dtype, const char* what, F&& f) {
  return cuda_util::VisitKvDType(dtype, what, std::forward<F>(f));
}

// The destinations' dtypes in per-row mode (those of the first row that has any; F32 when none).
std::pair<DType, DType> RowDTypes(const RopeKvArgs& args) {
  for (size_t t = 0; t < args.k_rows.size(); ++t)
    if (args.k_rows[t].data != nullptr) return {args.k_rows[t].dtype, args.v_rows[t].dtype};
  return {DType::kF32, DType::kF32};
}

}  // namespace

Status RopeKvCuda(const RopeKvArgs& args, cudaStream_t stream) {
  MP_RETURN_IF_ERROR(RopeKvCheckArgs(args));
  const int64_t n = args.q.dim(0);
  const int64_t q_heads = args.q.dim(1);
  const int64_t kv_heads = args.k.dim(1);
  const int64_t half = args.q.dim(2) / 2;
  if (n == 0 || half == 0 || (q_heads == 0 && kv_heads == 0)) return OkStatus();
  const size_t shared_bytes = 2 * static_cast<size_t>(half) * sizeof(float);
  MP_REQUIRE(shared_bytes <= 48 * 1024, "rope_kv: head_dim ", 2 * half,
             " is too large for RopeKvCuda");
  // Few rows (decode) are split into slices of heads, so that about kTargetBlocks blocks share
  // the work; each block has enough threads for its slice's value elements (the widest unit).
  const int64_t units = q_heads + 2 * kv_heads;
  const int64_t wanted = std::clamp<int64_t>((kTargetBlocks + n - 1) / n, 1, units);
  const int64_t per_slice = (units + wanted - 1) / wanted;
  const unsigned slices = static_cast<unsigned>((units + per_slice - 1) / per_slice);
  const int64_t work = per_slice * 2 * half;
  const int threads = static_cast<int>(std::clamp<int64_t>((work + 31) / 32 * 32, 32, kMaxThreads));
  const bool per_row = !args.k_rows.empty();
  const auto [k_dtype, v_dtype] =
      per_row ? RowDTypes(args) : std::pair{args.k_cache.dtype, args.v_cache.dtype};
  return VisitCacheDType(k_dtype, "rope_kv k_cache", [&](auto k_tag) {
    using K = typename decltype(k_tag)::type;
    return VisitCacheDType(v_dtype, "rope_kv v_cache", [&](auto v_tag) {
      using V = typename decltype(v_tag)::type;
      float* const q = args.q.as<float>();
      const float* const k = args.k.as<const float>();
      const float* const v = args.v.as<const float>();
      const int64_t* const positions = args.positions.as<const int64_t>();
      const float* const inv_freq = args.inv_freq.as<const float>();
      if (!per_row) {
        const unsigned blocks = static_cast<unsigned>(std::min(n, kMaxBlocks));
        RopeKvKernel<K, V><<<dim3(blocks, slices), threads, shared_bytes, stream>>>(
            q, k, v, positions, inv_freq, args.k_cache.as<K>(), args.v_cache.as<V>(), n, q_heads,
            kv_heads, half);
        MP_CUDA_CHECK_LAUNCH();
        return OkStatus();
      }
      const int64_t q_row = q_heads * 2 * half, kv_row = kv_heads * 2 * half;
      for (int64_t first = 0; first < n; first += RowDestinations::kMaxRows) {
        const int64_t count = std::min<int64_t>(RowDestinations::kMaxRows, n - first);
        RowDestinations dst;
        const bool whole = args.cache_rows.data != nullptr;
        dst.cache_rows = whole ? args.cache_rows.as<const int64_t>() + first : nullptr;
        for (int64_t i = 0; i < count; ++i) {
          const TensorView& k_dst = args.k_rows[static_cast<size_t>(first + i)];
          dst.k[i] = k_dst.data;
          dst.v[i] = args.v_rows[static_cast<size_t>(first + i)].data;
          dst.cache_size[i] = whole && k_dst.data != nullptr ? k_dst.dim(0) : 1;
        }
        RopeKvRowsKernel<K, V><<<dim3(static_cast<unsigned>(count), slices), threads, shared_bytes,
                                 stream>>>(
            q + first * q_row, k + first * kv_row, v + first * kv_row, positions + first,
            inv_freq, dst, q_heads, kv_heads, half);
        MP_CUDA_CHECK_LAUNCH();
      }
      return OkStatus();
    });
  });
}

}  // namespace millipede
