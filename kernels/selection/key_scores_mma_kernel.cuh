// The tensor-core KeyScores kernel (see key_scores_mma.cuh for the building blocks and the
// design): per K tile, the MMAs, then exp(scale s - lse) of every (row, key), the per-key sums
// over the block's rows and the per-diagonal sums, without writing the scores anywhere.
// Device code only.
#pragma once

#include <climits>
#include <cmath>
#include <cstdint>

#include "kernels/selection/key_scores_mma.cuh"

namespace millipede::key_scores_internal {

// The accumulator rows of one thread for the staged chunk: row i is row 8 i + lane / 4 of its
// warp (acc[i / 2][.][2 (i % 2) ...]).
template <typename Shape>
struct ThreadRows {
  static constexpr int kCount = Shape::kRowsPerWarpThread;
  float lse2[kCount];    // lse * log2(e); +inf: the row contributes nothing
  float factor[kCount];  // turns a scaled dot product into log2 units
  int64_t pos[kCount];
  // Row i + 1 holds the same query as row i (same 8-query block): their terms share diagonals.
  // The same in every lane of the warp.
  bool same_next[kCount];
};

template <typename Shape>
__device__ __forceinline__ void LoadThreadRows(const KeyScoresMmaParams& p, int64_t chunk,
                                               const char* smem, ThreadRows<Shape>* rows) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t* row_pos = reinterpret_cast<const int64_t*>(smem + Shape::kRowPosOffset);
  const float* row_lse = reinterpret_cast<const float*>(smem + Shape::kRowLseOffset);
  const float* row_factor = reinterpret_cast<const float*>(smem + Shape::kRowFactorOffset);
  int64_t query_block[ThreadRows<Shape>::kCount];
  for (int i = 0; i < ThreadRows<Shape>::kCount; ++i) {
    const int r = warp * Shape::kWarpRows + 8 * i + lane / 4;
    rows->lse2[i] = row_lse[r];
    rows->factor[i] = row_factor[r];
    rows->pos[i] = row_pos[r];
    query_block[i] = (chunk * Shape::kChunkRows + r) / 8 / p.group;
  }
  for (int i = 0; i < ThreadRows<Shape>::kCount; ++i)
    rows->same_next[i] = i + 1 < ThreadRows<Shape>::kCount && query_block[i] == query_block[i + 1];
}

// A run of tiles of one KV head: whether every query sees all its keys, and how it gathers its
// diagonal sums.
struct TileSpan {
  bool all_seen;     // every key is at or before every query
  bool diag;         // diag_score was given
  bool diag_shared;  // diagonals gathered in shared memory at (q_pos - q_min) + (k_max - k_pos)
  long long q_min, k_max;
  int size;  // diagonals in shared memory
};

// Sets up the run of keys [key_begin, key_end) against every query; zeroes its shared
// diagonals. Called by every thread (barriers inside).
template <typename Shape>
__device__ TileSpan BeginSpan(const KeyScoresMmaParams& p, int64_t key_begin, int64_t key_end,
                              long long q_min, long long q_max, char* smem) {
  long long k_min = 0, k_max = 0;
  BlockMinMax(p.k_pos, key_begin, key_end, &k_min, &k_max);
  TileSpan span{k_max <= q_min, p.diag_score != nullptr, false, q_min, k_max, 0};
  const unsigned long long q_range = static_cast<unsigned long long>(q_max) - q_min;
  const unsigned long long k_range = static_cast<unsigned long long>(k_max) - k_min;
  span.diag_shared =
      span.diag && q_range < kDiagSpan && k_range < kDiagSpan && q_range + k_range < kDiagSpan;
  if (span.diag_shared) {
    span.size = static_cast<int>(q_range + k_range + 1);
    float* diag = reinterpret_cast<float*>(smem + Shape::kDiagOffset);
    for (int i = threadIdx.x; i < span.size; i += kMmaThreads) diag[i] = 0.0f;
  }
  return span;
}

// Adds the gathered diagonals of KV head g to global memory: one atomic per nonzero diagonal
// (a diagonal is gathered only below n_diag). After a barrier that follows every shared add.
template <typename Shape>
__device__ void EndSpan(const KeyScoresMmaParams& p, int64_t g, const TileSpan& span,
                        const char* smem) {
  if (!span.diag_shared) return;
  const float* diag = reinterpret_cast<const float*>(smem + Shape::kDiagOffset);
  const int64_t d0 = static_cast<int64_t>(span.q_min) - span.k_max;
  for (int i = threadIdx.x; i < span.size; i += kMmaThreads)
    if (diag[i] != 0.0f) atomicAdd(&p.diag_score[g * p.n_diag + d0 + i], diag[i]);
}

// Adds one query's terms (summed over its rows) to their diagonals and clears them. A nonzero
// term has a key at or before the query, so d >= 0.
__device__ __forceinline__ void AddDiagonals(const KeyScoresMmaParams& p, int64_t g,
                                             const TileSpan& span, int64_t q_pos,
                                             const int64_t (&key_pos)[kTileKeys / 8][2],
                                             float (&terms)[kTileKeys / 8][2], float* diag) {
#pragma unroll
  for (int n = 0; n < kTileKeys / 8; ++n)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const float v = terms[n][e];
      terms[n][e] = 0.0f;
      if (v == 0.0f) continue;
      const int64_t d = q_pos - key_pos[n][e];
      if (d >= p.n_diag) continue;
      if (span.diag_shared)
        atomicAdd(&diag[(q_pos - span.q_min) + (span.k_max - key_pos[n][e])], v);
      else
        atomicAdd(&p.diag_score[g * p.n_diag + d], v);
    }
}

// exp2(acc * factor - lse2) of every (row, key) the causal rule lets through; the diagonal sums
// (with diag_score) and this warp's per-key sums into partial[warp][key]. kAllSeen: every key
// of the tile is valid and at or before every query, so only the rows are tested.
template <typename Shape, bool kAllSeen>
__device__ __forceinline__ void TileEpilogue(const KeyScoresMmaParams& p, int64_t g,
                                             const TileAcc<Shape>& acc,
                                             const ThreadRows<Shape>& rows, const int64_t* tile_pos,
                                             int n_valid, const TileSpan& span, float* partial,
                                             float* diag) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int64_t key_pos[kTileKeys / 8][2];
  float sums[kTileKeys / 8][2], terms[kTileKeys / 8][2];
#pragma unroll
  for (int n = 0; n < kTileKeys / 8; ++n)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      key_pos[n][e] = tile_pos[8 * n + 2 * (lane % 4) + e];
      sums[n][e] = terms[n][e] = 0.0f;
    }
#pragma unroll
  for (int i = 0; i < ThreadRows<Shape>::kCount; ++i) {
#pragma unroll
    for (int n = 0; n < kTileKeys / 8; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const bool seen =
            rows.lse2[i] < INFINITY &&
            (kAllSeen || (8 * n + 2 * (lane % 4) + e < n_valid && key_pos[n][e] <= rows.pos[i]));
        const float x = fmaf(acc[i / 2][n][2 * (i % 2) + e], rows.factor[i], -rows.lse2[i]);
        const float term = seen ? exp2f(x) : 0.0f;
        sums[n][e] += term;
        terms[n][e] += term;
      }
    if (span.diag && !rows.same_next[i])
      AddDiagonals(p, g, span, rows.pos[i], key_pos, terms, diag);
  }
#pragma unroll
  for (int n = 0; n < kTileKeys / 8; ++n)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float v = sums[n][e];
      for (int o = 4; o < 32; o *= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
      if (lane < 4) partial[warp * kTileKeys + 8 * n + 2 * lane + e] = v;
    }
}

// score[g, key] of tile `tile` from the warps' partial sums: written by the first row chunk,
// added to by the others.
__device__ __forceinline__ void FinishScores(const KeyScoresMmaParams& p, int64_t g, int64_t tile,
                                             int64_t chunk, const float* partial) {
  const int64_t key = tile * kTileKeys + threadIdx.x;
  if (threadIdx.x >= kTileKeys || key >= p.n_k) return;
  float sum = 0.0f;
  for (int w = 0; w < kMmaWarps; ++w) sum += partial[w * kTileKeys + threadIdx.x];
  float* out = &p.score[g * p.n_k + key];
  *out = chunk == 0 ? sum : *out + sum;
}

// Tiles [t0, t1) of KV head g against the staged row chunk: K tiles in two cp.async stages, the
// per-key sums of a tile finished after the next barrier. Ends with every shared read done.
template <typename T, typename Shape>
__device__ void RunTiles(const KeyScoresMmaParams& p, int64_t g, int64_t chunk, int64_t t0,
                         int64_t t1, const TileSpan& span, char* smem) {
  constexpr int kPartial = kMmaWarps * kTileKeys;
  ThreadRows<Shape> rows;
  LoadThreadRows<Shape>(p, chunk, smem, &rows);
  int64_t* tile_pos = reinterpret_cast<int64_t*>(smem + Shape::kKPosOffset);  // [2][kTileKeys]
  float* partial = reinterpret_cast<float*>(smem + Shape::kPartialOffset);    // [2][kPartial]
  float* diag = reinterpret_cast<float*>(smem + Shape::kDiagOffset);
  const int64_t first_pos = LoadKeyTile<T, Shape>(p, g, t0, 0, smem);
  if (threadIdx.x < kTileKeys) tile_pos[threadIdx.x] = first_pos;
  for (int64_t tile = t0; tile < t1; ++tile) {
    const int stage = static_cast<int>((tile - t0) & 1);
    attention_internal::CpAsyncWaitAll();
    __syncthreads();  // tile's K and positions landed; the other stage is free
    if (tile > t0) FinishScores(p, g, tile - 1, chunk, partial + (stage ^ 1) * kPartial);
    const bool has_next = tile + 1 < t1;
    // The next tile's positions are stored after this tile's MMAs hid the load.
    const int64_t next_pos = has_next ? LoadKeyTile<T, Shape>(p, g, tile + 1, stage ^ 1, smem) : 0;
    TileAcc<Shape> acc;
    TileDots<T, Shape>(smem, stage, acc);
    const int n_valid =
        static_cast<int>(min(static_cast<int64_t>(kTileKeys), p.n_k - tile * kTileKeys));
    const int64_t* stage_pos = tile_pos + stage * kTileKeys;
    float* stage_partial = partial + stage * kPartial;
    if (span.all_seen && n_valid == kTileKeys)
      TileEpilogue<Shape, true>(p, g, acc, rows, stage_pos, n_valid, span, stage_partial, diag);
    else
      TileEpilogue<Shape, false>(p, g, acc, rows, stage_pos, n_valid, span, stage_partial, diag);
    if (has_next && threadIdx.x < kTileKeys)
      tile_pos[(stage ^ 1) * kTileKeys + threadIdx.x] = next_pos;
  }
  __syncthreads();
  FinishScores(p, g, t1 - 1, chunk, partial + ((t1 - 1 - t0) & 1) * kPartial);
}

// Grid: up to one block per resident slot; kMmaThreads threads; Shape::kSharedBytes of dynamic
// shared memory. Block b takes the (KV head, tile) pairs [b T / grid, (b + 1) T / grid) of the T
// pairs, head-major, in runs of up to kSpanTiles tiles of one head.
template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kMmaThreads, 1) KeyScoresMmaKernel(const KeyScoresMmaParams p) {
  using Shape = KeyScoresMmaShape<kHeadDim>;
  extern __shared__ __align__(16) char smem[];
  const int64_t tiles_per_head = (p.n_k + kTileKeys - 1) / kTileKeys;
  const int64_t total = tiles_per_head * p.num_kv_heads;
  const int64_t begin = total * blockIdx.x / gridDim.x;
  const int64_t end = total * (blockIdx.x + 1) / gridDim.x;
  if (begin == end) return;
  long long q_min = 0, q_max = 0;
  BlockMinMax(p.q_pos, 0, p.n_q, &q_min, &q_max);
  const int64_t rows = (p.n_q + 7) / 8 * 8 * p.group;
  const int64_t chunks = (rows + Shape::kChunkRows - 1) / Shape::kChunkRows;
  int64_t staged = -1;  // g * chunks + chunk of the rows in shared memory
  for (int64_t f = begin; f < end;) {
    const int64_t g = f / tiles_per_head, t0 = f - g * tiles_per_head;
    const int64_t t1 = min(min(t0 + kSpanTiles, tiles_per_head), end - g * tiles_per_head);
    const TileSpan span =
        BeginSpan<Shape>(p, t0 * kTileKeys, min(t1 * kTileKeys, p.n_k), q_min, q_max, smem);
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
      if (staged != g * chunks + chunk) {
        StageQueries<T, Shape>(p, g, chunk, smem);
        staged = g * chunks + chunk;
      }
      RunTiles<T, Shape>(p, g, chunk, t0, t1, span, smem);
    }
    EndSpan<Shape>(p, g, span, smem);
    f += t1 - t0;
  }
}

}  // namespace millipede::key_scores_internal
