// Tensor-core KeyScores for BF16 and F16 keys with head_dim 64, 128 or 256: per KV head the
// scores are the GEMM [observed (query, head) rows, head_dim] x [head_dim, keys] on mma.sync
// m16n8k16 with fp32 accumulators, followed by exp(scale s - lse) and two reductions (per key
// over the rows, per diagonal q_pos - k_pos), all in registers and shared memory: the score
// matrix never reaches global memory.
//
// Precision: the keys are exact in their 16-bit type, the queries are F32. Each query row is
// scaled by a power of two (exact) so that its largest |q| lies in [2^14, 2^15), then split into
// hi = round(q) and lo = round(q - hi) in the key type, and both parts are multiplied with the
// keys into the same accumulator: q is carried to 16 significant bits with BF16 (22 with F16),
// so a score's relative error is a few 1e-6 against the double reference (bf16 q alone would be
// ~1e-3). The power of two keeps F16 parts finite and normal; it is undone in the exponent.
//
// Work split: the (KV head, 64-key tile) pairs, head-major, are dealt out in equal contiguous
// runs to one block per SM slot. A block stages the rows of its KV head once (as the two 16-bit
// parts, swizzled) and streams K tiles through shared memory with cp.async, two stages. The rows
// are (query, head) pairs ordered by 8-query blocks, then head, then query: row
// (tb * group + h) * 8 + t % 8 holds query t = tb * 8 + t % 8 and head h of the group, so the
// accumulator rows a thread holds (r, r + 8, r + 16, r + 24 of its warp; r, r + 8 with
// head_dim 256) share one query when group is a multiple of 4 (of 2), and their terms are
// added in registers before they go to their diagonal. Diagonals are gathered per run of up to 32
// tiles in shared memory when the run's diagonals span at most kDiagSpan (queries and keys at
// nearby positions), then added to global memory with one atomic each; otherwise each term goes to
// global memory directly. Device code only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>

#include "kernels/attention/attention_mma.cuh"

namespace millipede::key_scores_internal {

inline constexpr int kMmaWarps = 8;
inline constexpr int kMmaThreads = 32 * kMmaWarps;
inline constexpr int kTileKeys = 64;
inline constexpr int kSpanTiles = 32;   // tiles whose diagonals are gathered together
inline constexpr int kDiagSpan = 4096;  // diagonals a span may gather in shared memory
inline constexpr float kLog2e = 1.4426950408889634f;

struct KeyScoresMmaParams {
  const float* q;        // [n_q, num_heads, head_dim]
  const int64_t* q_pos;  // [n_q]
  const void* k;         // [n_k, num_kv_heads, head_dim], BF16 or F16
  const int64_t* k_pos;  // [n_k]
  const float* lse;      // [n_q, num_heads]
  float* score;          // [num_kv_heads, n_k]
  float* diag_score;     // [num_kv_heads, n_diag], zeroed; nullptr: no diagonal sums
  int64_t n_diag, n_q, num_heads, n_k, num_kv_heads, group;
  float scale_log2;  // softmax scale * log2(e)
  bool k_aligned;    // k is 16-byte aligned: K tiles by cp.async, else by 2-byte loads
};

// Compile-time shape and shared-memory layout (byte offsets) of one instance.
template <int kHeadDimT>
struct KeyScoresMmaShape {
  static constexpr int kHeadDim = kHeadDimT;
  static constexpr int kMTiles = kHeadDim <= 128 ? 2 : 1;  // 16-row MMA tiles per warp
  static constexpr int kWarpRows = 16 * kMTiles;
  static constexpr int kRowsPerWarpThread = 2 * kMTiles;  // accumulator rows per thread
  static constexpr int kChunkRows = kMmaWarps * kWarpRows;
  static constexpr int kRowBytes = 2 * kHeadDim;
  static constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks per row
  static constexpr int kQPartBytes = kChunkRows * kRowBytes;
  static constexpr int kKBufBytes = kTileKeys * kRowBytes;
  static constexpr int kKOffset = 2 * kQPartBytes;  // after the hi and lo parts of Q
  static constexpr int kKPosOffset = kKOffset + 2 * kKBufBytes;
  static constexpr int kRowPosOffset = kKPosOffset + 2 * kTileKeys * 8;
  static constexpr int kRowLseOffset = kRowPosOffset + kChunkRows * 8;
  static constexpr int kRowFactorOffset = kRowLseOffset + kChunkRows * 4;
  static constexpr int kPartialOffset = kRowFactorOffset + kChunkRows * 4;
  static constexpr int kDiagOffset = kPartialOffset + 2 * kMmaWarps * kTileKeys * 4;
  static constexpr int kSharedBytes = kDiagOffset + kDiagSpan * 4;
  static_assert(kHeadDim % 64 == 0 && kHeadDim <= 256, "head_dim 64, 128 or 256");
  static_assert(kSharedBytes <= 227 * 1024, "shared memory of one SM");
};

// Byte offset of 16-byte chunk `chunk` of `row` in a tile of 16-bit rows: XOR-ing the chunk
// with row % 8 spreads one chunk of 8 consecutive rows over all banks, so ldmatrix runs without
// conflicts.
template <int kRowBytes>
__device__ __forceinline__ int SwizzledOffset(int row, int chunk) {
  return row * kRowBytes + ((chunk ^ (row & 7)) << 4);
}

template <typename T>
__device__ __forceinline__ float RoundTo(float x);
template <>
__device__ __forceinline__ float RoundTo<__nv_bfloat16>(float x) {
  return __bfloat162float(__float2bfloat16_rn(x));
}
template <>
__device__ __forceinline__ float RoundTo<__half>(float x) {
  return __half2float(__float2half_rn(x));
}

// Block-wide minimum and maximum of v[begin, end) (end > begin), returned to every thread.
__device__ inline void BlockMinMax(const int64_t* v, int64_t begin, int64_t end, long long* lo,
                                   long long* hi) {
  __shared__ long long warp_lo[kMmaWarps], warp_hi[kMmaWarps];
  long long my_lo = LLONG_MAX, my_hi = LLONG_MIN;
  for (int64_t i = begin + threadIdx.x; i < end; i += kMmaThreads) {
    my_lo = min(my_lo, static_cast<long long>(v[i]));
    my_hi = max(my_hi, static_cast<long long>(v[i]));
  }
  for (int o = 16; o > 0; o /= 2) {
    my_lo = min(my_lo, __shfl_xor_sync(0xffffffffu, my_lo, o));
    my_hi = max(my_hi, __shfl_xor_sync(0xffffffffu, my_hi, o));
  }
  if (threadIdx.x % 32 == 0) {
    warp_lo[threadIdx.x / 32] = my_lo;
    warp_hi[threadIdx.x / 32] = my_hi;
  }
  __syncthreads();
  *lo = LLONG_MAX;
  *hi = LLONG_MIN;
  for (int w = 0; w < kMmaWarps; ++w) {
    *lo = min(*lo, warp_lo[w]);
    *hi = max(*hi, warp_hi[w]);
  }
  __syncthreads();  // the next call may overwrite warp_lo / warp_hi
}

// Writes row r of the staged chunk: q (this lane's kPerLane values) scaled by a power of two and
// split into the hi and lo parts (swizzled rows), and, from lane 0, the row's position, its
// lse * log2(e) (+inf for a row that contributes nothing: past the last query, or an lse of
// -inf) and the factor that turns its scaled dot products into log2 units.
template <typename T, typename Shape, int kPerLane>
__device__ __forceinline__ void StageRow(const KeyScoresMmaParams& p, int r, bool valid, int64_t t,
                                         int64_t h, const float (&x)[kPerLane], char* smem) {
  using Mma = attention_internal::MmaType<T>;
  const int lane = threadIdx.x % 32;
  float max_abs = 0.0f;
  for (int i = 0; i < kPerLane; ++i) max_abs = fmaxf(max_abs, fabsf(x[i]));
  for (int o = 16; o > 0; o /= 2)
    max_abs = fmaxf(max_abs, __shfl_xor_sync(0xffffffffu, max_abs, o));
  int e = 0;
  if (max_abs > 0.0f && max_abs <= FLT_MAX) {
    int max_exp = 0;
    // max_abs is in [2^(max_exp - 1), 2^max_exp); |e| <= 100 keeps the factor's 2^-e normal.
    frexpf(max_abs, &max_exp);
    e = min(max(15 - max_exp, -100), 100);
  }
  const float up = ldexpf(1.0f, e);
  const int first = lane * kPerLane;
  char* dst = smem + SwizzledOffset<Shape::kRowBytes>(r, first / 8) + (first % 8) * 2;
  for (int i = 0; i < kPerLane; i += 2) {
    const float a = x[i] * up, b = x[i + 1] * up;
    const float a_hi = RoundTo<T>(a), b_hi = RoundTo<T>(b);
    *reinterpret_cast<uint32_t*>(dst + 2 * i) = Mma::Pack(a_hi, b_hi);
    *reinterpret_cast<uint32_t*>(dst + Shape::kQPartBytes + 2 * i) = Mma::Pack(a - a_hi, b - b_hi);
  }
  if (lane == 0) {
    const float l = valid ? p.lse[t * p.num_heads + h] : -INFINITY;
    reinterpret_cast<int64_t*>(smem + Shape::kRowPosOffset)[r] = valid ? p.q_pos[t] : 0;
    reinterpret_cast<float*>(smem + Shape::kRowLseOffset)[r] =
        l == -INFINITY ? INFINITY : l * kLog2e;
    reinterpret_cast<float*>(smem + Shape::kRowFactorOffset)[r] = ldexpf(p.scale_log2, -e);
  }
}

// Stages rows [chunk * kChunkRows, +kChunkRows) of KV head g (StageRow). A warp loads
// kStageBatch rows before it reduces any, so their loads overlap. Ends with a barrier.
template <typename T, typename Shape>
__device__ void StageQueries(const KeyScoresMmaParams& p, int64_t g, int64_t chunk, char* smem) {
  constexpr int kPerLane = Shape::kHeadDim / 32, kStageBatch = 4;
  static_assert(Shape::kChunkRows % (kMmaWarps * kStageBatch) == 0, "whole batches");
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int r0 = warp * kStageBatch; r0 < Shape::kChunkRows; r0 += kMmaWarps * kStageBatch) {
    int64_t t[kStageBatch], h[kStageBatch];
    float x[kStageBatch][kPerLane];
#pragma unroll
    for (int b = 0; b < kStageBatch; ++b) {
      const int64_t row = chunk * Shape::kChunkRows + r0 + b, block8 = row / 8;
      t[b] = block8 / p.group * 8 + row % 8;
      h[b] = g * p.group + block8 % p.group;
      const bool valid = t[b] < p.n_q;
      const float* src =
          p.q + (valid ? (t[b] * p.num_heads + h[b]) * Shape::kHeadDim + lane * kPerLane : 0);
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) x[b][i] = valid ? src[i] : 0.0f;
    }
#pragma unroll
    for (int b = 0; b < kStageBatch; ++b)
      StageRow<T, Shape, kPerLane>(p, r0 + b, t[b] < p.n_q, t[b], h[b], x[b], smem);
  }
  __syncthreads();
}

// Starts copying K tile `tile` of KV head g into stage `stage` (zeros past the last key) and
// returns this thread's key position of the tile (threads < kTileKeys; 0 past the last key),
// which the caller stores once the load has landed.
template <typename T, typename Shape>
__device__ __forceinline__ int64_t LoadKeyTile(const KeyScoresMmaParams& p, int64_t g, int64_t tile,
                                               int stage, char* smem) {
  using attention_internal::CpAsync16;
  using attention_internal::SharedAddress;
  const int64_t key0 = tile * kTileKeys;
  const T* k = static_cast<const T*>(p.k);
  char* tile_smem = smem + Shape::kKOffset + stage * Shape::kKBufBytes;
  for (int e = threadIdx.x; e < kTileKeys * Shape::kChunks; e += kMmaThreads) {
    const int j = e / Shape::kChunks, chunk = e % Shape::kChunks;
    const bool valid = key0 + j < p.n_k;
    const T* src = k + ((valid ? key0 + j : 0) * p.num_kv_heads + g) * Shape::kHeadDim + chunk * 8;
    char* dst = tile_smem + SwizzledOffset<Shape::kRowBytes>(j, chunk);
    if (p.k_aligned) {
      CpAsync16(SharedAddress(dst), src, valid);
    } else {
      const uint16_t* s = reinterpret_cast<const uint16_t*>(src);
      uint32_t w[4] = {0, 0, 0, 0};
      if (valid)
        for (int i = 0; i < 4; ++i) w[i] = s[2 * i] | static_cast<uint32_t>(s[2 * i + 1]) << 16;
      *reinterpret_cast<uint4*>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
  attention_internal::CpAsyncCommit();
  const int64_t key = key0 + threadIdx.x;
  return threadIdx.x < kTileKeys && key < p.n_k ? p.k_pos[key] : 0;
}

// A warp's MMA accumulators for one K tile: acc[m][n][i] is row 16 m + lane / 4 (+ 8 for
// i >= 2) of the warp's rows and key 8 n + 2 (lane % 4) + i % 2 of the tile.
template <typename Shape>
using TileAcc = float[Shape::kMTiles][kTileKeys / 8][4];

// acc = this warp's rows of the staged chunk x the keys of K stage `stage`: scaled q.k, hi and
// lo parts summed. The k-steps are unrolled by 2: fully unrolled they spill past 255 registers
// (head_dim 128 and 256).
template <typename T, typename Shape>
__device__ __forceinline__ void TileDots(const char* smem, int stage, TileAcc<Shape>& acc) {
  using attention_internal::Ldmatrix4;
  using Mma = attention_internal::MmaType<T>;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const uint32_t q_base = attention_internal::SharedAddress(smem);
  const uint32_t k_base =
      attention_internal::SharedAddress(smem + Shape::kKOffset + stage * Shape::kKBufBytes);
  // ldmatrix row addresses: A takes (rows 0-7, 8-15) x (k 0-7, 8-15) as a0..a3; B takes
  // (keys 0-7 k 0-7, keys 0-7 k 8-15, keys 8-15 k 0-7, keys 8-15 k 8-15) as two n-tiles' b0, b1.
  // Chunk 2 ks + half of a row whose row % 8 is lane % 8 sits, swizzled, at byte
  // ((half ^ lane % 8) * 16) ^ (ks * 32) of the row: one XOR per k-step.
  const uint32_t a_addr = q_base + (warp * Shape::kWarpRows + lane % 8 + 8 * ((lane / 8) % 2)) *
                                       Shape::kRowBytes,
                 a_chunk = ((lane / 16) ^ (lane % 8)) * 16;
  const uint32_t b_addr = k_base + (lane % 8 + 8 * (lane / 16)) * Shape::kRowBytes,
                 b_chunk = (((lane / 8) % 2) ^ (lane % 8)) * 16;
  for (int m = 0; m < Shape::kMTiles; ++m)
    for (int n = 0; n < kTileKeys / 8; ++n)
      for (int i = 0; i < 4; ++i) acc[m][n][i] = 0.0f;
#pragma unroll 2
  for (int ks = 0; ks < Shape::kHeadDim / 16; ++ks) {
    uint32_t a[Shape::kMTiles][2][4];
    const uint32_t a_at = a_addr + (a_chunk ^ (ks * 32)), b_at = b_addr + (b_chunk ^ (ks * 32));
#pragma unroll
    for (int m = 0; m < Shape::kMTiles; ++m) {
      Ldmatrix4(a[m][0], a_at + m * 16 * Shape::kRowBytes);
      Ldmatrix4(a[m][1], a_at + m * 16 * Shape::kRowBytes + Shape::kQPartBytes);
    }
#pragma unroll
    for (int np = 0; np < kTileKeys / 16; ++np) {
      uint32_t b[4];
      Ldmatrix4(b, b_at + np * 16 * Shape::kRowBytes);
#pragma unroll
      for (int m = 0; m < Shape::kMTiles; ++m)
#pragma unroll
        for (int part = 1; part >= 0; --part) {  // the small part first
          Mma::Mma(acc[m][2 * np], a[m][part], b[0], b[1]);
          Mma::Mma(acc[m][2 * np + 1], a[m][part], b[2], b[3]);
        }
    }
  }
}

}  // namespace millipede::key_scores_internal
