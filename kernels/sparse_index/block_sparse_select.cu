// The selection step of BlockSparseIndexCuda: per slab of tiles, a tiled fp32 GEMM of the
// query-block sums against the key-block sums, then a radix select of each item's best key
// blocks into a bitmap.
#include <algorithm>
#include <cstdint>
#include <cub/block/block_scan.cuh>

#include "common/cuda_check.h"
#include "kernels/sparse_index/block_sparse_index.cuh"
#include "kernels/sparse_index/sparse_index.cuh"

namespace millipede::block_sparse_cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kTile = 64;     // GEMM: 64 tiles x 64 key blocks per thread block
constexpr int kDimStep = 16;  // head_dim slice staged in shared memory
constexpr size_t kScoreBudget = size_t{128} << 20;
constexpr size_t kMaxSharedKeys = size_t{160} << 10;

// scores[g, r, kb] = q_sums[qb(t0 + r), g] . k_sums[kb, g] for kb < the largest qb of the 64
// rows (later key blocks are never read). Each thread computes 4 x 4 outputs; every dot product
// adds its head_dim terms in ascending order, so equal inputs give equal scores.
__global__ void __launch_bounds__(kThreads)
    ScoresKernel(const float* __restrict__ q_sums, const float* __restrict__ k_sums,
                 const int64_t* __restrict__ tiles, int64_t t0, int64_t slab_rows,
                 int64_t num_blocks, int64_t heads, int64_t head_dim, int64_t block,
                 float* __restrict__ scores) {
  __shared__ float qs[kDimStep][kTile + 1];  // padded: the staging stores hit distinct banks
  __shared__ float ks[kDimStep][kTile + 1];
  __shared__ int64_t qb_of[kTile];
  __shared__ int64_t max_qb;
  const int64_t g = blockIdx.z, row0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kTile;
  if (threadIdx.x == 0) max_qb = -1;
  __syncthreads();
  if (threadIdx.x < kTile) {
    const int64_t r = row0 + threadIdx.x;
    int64_t qb = r < slab_rows ? tiles[3 * (t0 + r) + 2] / block : -1;
    if (qb >= num_blocks || qb < 0) qb = -1;  // broken tile, reported by the checks
    qb_of[threadIdx.x] = qb;
    atomicMax(reinterpret_cast<long long*>(&max_qb), static_cast<long long>(qb));
  }
  __syncthreads();
  if (col0 >= max_qb) return;  // uniform: no row needs these key blocks
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < head_dim; k0 += kDimStep) {
    for (int e = threadIdx.x; e < kTile * kDimStep; e += kThreads) {
      const int i = e / kDimStep, k = e % kDimStep;
      const int64_t qb = qb_of[i], kb = col0 + i;
      const bool in_dim = k0 + k < head_dim;
      qs[k][i] = qb >= 0 && in_dim ? q_sums[(qb * heads + g) * head_dim + k0 + k] : 0.0f;
      ks[k][i] = kb < num_blocks && in_dim ? k_sums[(kb * heads + g) * head_dim + k0 + k] : 0.0f;
    }
    __syncthreads();
    for (int k = 0; k < kDimStep; ++k) {
      float a[4], b[4];
      for (int i = 0; i < 4; ++i) a[i] = qs[k][ty * 4 + i];
      for (int j = 0; j < 4; ++j) b[j] = ks[k][tx * 4 + j];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i) {
    const int64_t r = row0 + ty * 4 + i;
    if (r >= slab_rows) continue;
    for (int j = 0; j < 4; ++j) {
      const int64_t kb = col0 + tx * 4 + j;
      if (kb < num_blocks) scores[(g * slab_rows + r) * num_blocks + kb] = acc[i][j];
    }
  }
}

// Larger float, larger key; NaN maps to 0, below every number, and marks a block that is not a
// candidate; -0.0 ties with +0.0.
__device__ __forceinline__ uint32_t OrderKey(float x) {
  if (isnan(x)) return 0;
  const uint32_t u = __float_as_uint(x == 0.0f ? 0.0f : x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ void SetBit(uint32_t* bits, int64_t i) {
  atomicOr(&bits[i >> 5], 1u << (i & 31));
}

struct SelectParams {
  const float* scores;
  int64_t t0, slab_rows;
  const int64_t* tiles;
  int64_t n_tiles;
  const float* q_counts;
  const float* k_counts;
  const int64_t* top;  // [heads], device
  int64_t num_blocks, block, group, words;
  uint32_t* kept;  // [heads * n_tiles, words]
  bool keys_in_shared;
};

// Keys of the candidates kb < qb (0 for blocks that are not candidates); returns how many there
// are. Scores scale as the reference's: (dot / (q_count * group)) / k_count.
__device__ int64_t MakeKeys(const SelectParams& p, const float* row, uint32_t* keys, int64_t qb) {
  __shared__ unsigned long long candidates;
  if (threadIdx.x == 0) candidates = 0;
  __syncthreads();
  const float q_scale = 1.0f / (p.q_counts[qb] * static_cast<float>(p.group));
  unsigned long long mine = 0;
  for (int64_t kb = threadIdx.x; kb < qb; kb += kThreads) {
    const float k_count = p.k_counts[kb];
    const uint32_t key = k_count > 0.0f ? OrderKey(row[kb] * q_scale / k_count) : 0;
    keys[kb] = key;  // in place when keys alias row: this thread read row[kb] first
    mine += key != 0;
  }
  atomicAdd(&candidates, mine);
  __syncthreads();
  return static_cast<int64_t>(candidates);
}

// The key of rank `want` (1 = largest) among the non-zero keys[0, n), found 8 bits at a time;
// *equal_kept is how many keys equal to it rank within the first `want`.
__device__ uint32_t RadixSelect(const uint32_t* keys, int64_t n, int64_t want,
                                int64_t* equal_kept) {
  __shared__ unsigned hist[256];
  __shared__ uint32_t prefix, mask;
  __shared__ int64_t remaining;
  if (threadIdx.x == 0) {
    prefix = 0;
    mask = 0;
    remaining = want;
  }
  for (int shift = 24; shift >= 0; shift -= 8) {
    __syncthreads();
    for (int i = threadIdx.x; i < 256; i += kThreads) hist[i] = 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < n; i += kThreads) {
      const uint32_t key = keys[i];
      if (key != 0 && (key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int64_t above = 0;
      for (int digit = 255; digit >= 0; --digit) {
        if (above + hist[digit] >= remaining) {
          prefix |= static_cast<uint32_t>(digit) << shift;
          mask |= 255u << shift;
          remaining -= above;
          break;
        }
        above += hist[digit];
      }
    }
  }
  __syncthreads();
  *equal_kept = remaining;
  return prefix;
}

// One block per item of the slab: the kept-block bitmap of (g, t0 + blockIdx.x).
__global__ void __launch_bounds__(kThreads) SelectKernel(SelectParams p) {
  extern __shared__ uint32_t shared_keys[];
  using Scan = cub::BlockScan<int, kThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  const int64_t g = blockIdx.y, r = blockIdx.x, t = p.t0 + r;
  uint32_t* bits = p.kept + (g * p.n_tiles + t) * p.words;
  for (int64_t w = threadIdx.x; w < p.words; w += kThreads) bits[w] = 0;
  const int64_t rows = p.tiles[3 * t + 1] - p.tiles[3 * t], pos = p.tiles[3 * t + 2];
  const int64_t qb = pos >= 0 ? pos / p.block : -1;
  if (p.top[g] <= 0 || rows < 1 || qb < 0 || qb >= p.num_blocks || !(p.q_counts[qb] > 0.0f))
    return;         // an empty item, or a broken tile reported by the checks
  __syncthreads();  // the bitmap is clear
  const float* row = p.scores + (g * p.slab_rows + r) * p.num_blocks;
  uint32_t* keys =
      p.keys_in_shared ? shared_keys : reinterpret_cast<uint32_t*>(const_cast<float*>(row));
  const int64_t want = p.top[g] - 1;
  const int64_t candidates = want > 0 ? MakeKeys(p, row, keys, qb) : 0;
  if (candidates > 0 && candidates <= want) {
    for (int64_t kb = threadIdx.x; kb < qb; kb += kThreads)
      if (keys[kb] != 0) SetBit(bits, kb);
  } else if (candidates > want) {
    int64_t equal_kept = 0;
    const uint32_t threshold = RadixSelect(keys, qb, want, &equal_kept);
    // Keys above the threshold, then the first equal_kept keys equal to it in block order.
    int64_t equal_seen = 0;
    for (int64_t base = 0; base < qb && equal_seen < equal_kept; base += kThreads) {
      const int64_t kb = base + threadIdx.x;
      const uint32_t key = kb < qb ? keys[kb] : 0;
      int rank = 0, total = 0;
      Scan(scan_storage).ExclusiveSum(key == threshold ? 1 : 0, rank, total);
      if (key == threshold && equal_seen + rank < equal_kept) SetBit(bits, kb);
      equal_seen += total;
      __syncthreads();  // scan_storage is reused
    }
    for (int64_t kb = threadIdx.x; kb < qb; kb += kThreads)
      if (keys[kb] > threshold) SetBit(bits, kb);
  }
  if (threadIdx.x == 0) SetBit(bits, qb);
}

}  // namespace

Status Select(const BlockSparseIndexArgs& args, const int64_t* top, int64_t max_top, uint32_t* kept,
              int64_t words, SparseIndexCudaWorkspace::Impl& ws, cudaStream_t stream) {
  const int64_t num_blocks = args.q_sums.dim(0), heads = args.q_sums.dim(1);
  const int64_t head_dim = args.q_sums.dim(2), n_tiles = args.tiles.dim(0);
  const size_t row_bytes = static_cast<size_t>(heads * num_blocks) * sizeof(float);
  const int64_t slab =
      std::clamp<int64_t>(static_cast<int64_t>(kScoreBudget / std::max<size_t>(row_bytes, 1)), 1,
                          std::max<int64_t>(n_tiles, 1));
  if (max_top > 1) MP_RETURN_IF_ERROR(ws.scores.Reserve(row_bytes * slab, stream));
  const size_t key_bytes = static_cast<size_t>(num_blocks) * sizeof(uint32_t);
  const bool keys_in_shared = max_top > 1 && key_bytes <= kMaxSharedKeys;
  const size_t shared_bytes = keys_in_shared ? key_bytes : 0;
  if (shared_bytes > (size_t{48} << 10))
    MP_CUDA_CHECK(cudaFuncSetAttribute(SelectKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(shared_bytes)));
  MP_REQUIRE(heads <= 65535, "block_sparse_index: ", heads, " KV heads exceed the grid");
  for (int64_t t0 = 0; t0 < n_tiles; t0 += slab) {
    const int64_t rows = std::min(slab, n_tiles - t0);
    float* scores = static_cast<float*>(ws.scores.data());
    if (max_top > 1) {
      const dim3 grid(static_cast<unsigned>((num_blocks + kTile - 1) / kTile),
                      static_cast<unsigned>((rows + kTile - 1) / kTile),
                      static_cast<unsigned>(heads));
      ScoresKernel<<<grid, kThreads, 0, stream>>>(args.q_sums.as<const float>(),
                                                  args.k_sums.as<const float>(),
                                                  args.tiles.as<const int64_t>(), t0, rows,
                                                  num_blocks, heads, head_dim, args.block, scores);
      MP_CUDA_CHECK_LAUNCH();
    }
    SelectParams p{scores,
                   t0,
                   rows,
                   args.tiles.as<const int64_t>(),
                   n_tiles,
                   args.q_counts.as<const float>(),
                   args.k_counts.as<const float>(),
                   top,
                   num_blocks,
                   args.block,
                   args.group,
                   words,
                   kept,
                   keys_in_shared};
    SelectKernel<<<dim3(static_cast<unsigned>(rows), static_cast<unsigned>(heads)), kThreads,
                   shared_bytes, stream>>>(p);
    MP_CUDA_CHECK_LAUNCH();
  }
  return OkStatus();
}

}  // namespace millipede::block_sparse_cuda
