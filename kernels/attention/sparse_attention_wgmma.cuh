// The producer and mask of the Hopper sparse attention kernel (sparse_attention_wgmma.cu): the
// chunks a stage holds, the walk over an item's ranges and columns, the cp.async gathers and TMA
// loads that fill a stage, and the consumers' mask. Device code only; compile for sm_90a.
#pragma once

#include <cuda.h>

#include <climits>
#include <cstdint>

#include "kernels/attention/attention_wgmma.cuh"
#include "kernels/attention/sparse_attention_cuda_internal.h"

namespace millipede::sparse_attention_internal {

namespace ai = attention_internal;

inline constexpr int kWarpgroups = 2;
inline constexpr int kRows = ai::kWgmmaWgRows * kWarpgroups;  // packed query rows per block
inline constexpr int kChunkKeys = ai::kWgmmaKeys / 2;         // keys per chunk, two per tile
inline constexpr int kConsumerThreads = 128 * kWarpgroups;
inline constexpr int kProducerThreads = 128;
inline constexpr int kThreads = kConsumerThreads + kProducerThreads;
// Named barriers: per-warpgroup Q staging (1, 2), the consumers' turns (3, 4), the producer.
inline constexpr int kQBarrier = 1;
inline constexpr int kTurnBarrier = 3;
inline constexpr int kProducerBarrier = 5;

enum ChunkKind : int32_t { kEmpty = 0, kRange = 1, kColumns = 2 };

// One 64-key half of a stage as the producer resolved it.
struct Chunk {
  int64_t first;    // kRange: key row of slot 0; kColumns: index into columns of slot 0
  int64_t pos;      // kRange: position of slot 0
  int64_t max_pos;  // position of the last valid slot; -1 when there is none
  int32_t kind;
  int32_t count;  // valid slots, from slot 0
};

// A chunk in shared memory, for the producer's gathers and the consumers' mask.
struct StageChunk {
  Chunk chunk;
  // kColumns with max_pos after the tile's first position: each slot's position relative to it
  // (written only then, so that the mask reads 32-bit values from shared memory).
  int32_t rel[kChunkKeys];
};

// Shared memory from a 1024-byte aligned base: the Q staging area [warpgroup][column block][64
// rows][128 bytes], kStages x (K tile, V tile) as [column block][128 keys][128 bytes], the
// stages' chunks, the full and empty barriers and the prologue's two counters.
template <int kHeadDimT>
struct SparseTile {
  static constexpr int kHeadDim = kHeadDimT;
  static constexpr int kColumnBlocks = kHeadDim / 64;
  static constexpr int kStages = kHeadDim == 128 ? 3 : 4;
  // The producer gathers rows with address arithmetic of its own, so it keeps more registers
  // than the dense kernel's TMA-only producer. The block holds 168 registers per thread (65536
  // / kThreads, rounded down to a multiple of 8), and setmaxnreg only moves them between the
  // warpgroups; at head_dim 128 the consumers need 232.
  static constexpr int kProducerRegisters = kHeadDim == 128 ? 40 : 56;
  static constexpr int kConsumerRegisters = kHeadDim == 128 ? 232 : 224;
  static_assert(kProducerThreads * kProducerRegisters + kConsumerThreads * kConsumerRegisters <=
                    kThreads * 168,
                "setmaxnreg cannot give out more registers than the block holds");
  static constexpr int kQWgBytes = kColumnBlocks * ai::kWgmmaWgRows * 128;
  static constexpr int kQBytes = kWarpgroups * kQWgBytes;
  static constexpr int kKvBlockBytes = ai::kWgmmaKeys * 128;
  static constexpr int kKvBytes = kColumnBlocks * kKvBlockBytes;  // one K or V tile
  static constexpr int kStageBytes = 2 * kKvBytes;
  static constexpr int kChunkBytes = kChunkKeys * 128;  // one chunk of one column block
  static constexpr int kChunkTmaBytes = 2 * kColumnBlocks * kChunkBytes;  // its K and V
  static constexpr int kChunksOffset = kQBytes + kStages * kStageBytes;
  static constexpr int kBarriersOffset = kChunksOffset + kStages * 2 * sizeof(StageChunk);
  static constexpr int kCountersOffset = kBarriersOffset + 2 * kStages * 8;
  static constexpr int kSmemBytes = 1024 + kCountersOffset + 16;
  static_assert(kHeadDim == 64 || kHeadDim == 128, "one or two 128-byte column blocks");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory of one SM");
};

// An item's keys: its ranges and columns in the index, and the last position its tile holds.
struct ItemKeys {
  int64_t range_begin, range_end, column_begin, column_end;
  int64_t first_pos, last_pos;
};

__host__ __device__ __forceinline__ int64_t Min64(int64_t a, int64_t b) { return a < b ? a : b; }
__host__ __device__ __forceinline__ int64_t Max64(int64_t a, int64_t b) { return a > b ? a : b; }

// Keys of a range at positions <= last (<= 0: none).
__device__ __forceinline__ int64_t VisibleKeys(const int64_t* range, int64_t last) {
  return Min64(range[1] - range[0], last - range[2] + 1);
}

// The producer's walk over an item's chunks (its scheduling thread only): the ranges' keys in
// chunks of 64, then the visible columns (a prefix, as columns are sorted by position), then
// empty chunks.
struct ChunkCursor {
  int64_t range, offset, column, column_end;

  __device__ Chunk Next(const SparseAttentionParams& p, const ItemKeys& keys) {
    for (; range < keys.range_end; ++range, offset = 0) {
      const int64_t* r = p.ranges + 3 * range;
      const int64_t n = VisibleKeys(r, keys.last_pos);
      if (offset >= n) continue;
      const int count = static_cast<int>(Min64(kChunkKeys, n - offset));
      const Chunk c{r[0] + offset, r[2] + offset, r[2] + offset + count - 1, kRange, count};
      offset += kChunkKeys;
      return c;
    }
    if (column < column_end) {
      const int count = static_cast<int>(Min64(kChunkKeys, column_end - column));
      const Chunk c{column, 0, p.columns[2 * (column + count - 1) + 1], kColumns, count};
      column += count;
      return c;
    }
    return Chunk{0, 0, -1, kEmpty, 0};
  }
};

// pos - first, clamped into int (the mask compares it with rows' offsets 0..63).
__device__ __forceinline__ int RelativePosition(int64_t pos, int64_t first) {
  return static_cast<int>(Max64(-(1 << 30), Min64(1 << 30, pos - first)));
}

__device__ __forceinline__ bool ByTma(const Chunk& c) {
  return c.kind == kRange && c.count == kChunkKeys;
}

// Gathers the K and V rows of a chunk into its half of a stage (k_dst: its K rows; V lies
// Tile::kKvBytes further), 16 bytes per cp.async, in the 128-byte swizzle TMA writes; slots
// past the chunk's count and rows outside k are zero-filled.
template <typename Tile>
__device__ __forceinline__ void GatherChunk(const SparseAttentionParams& p, const Chunk& c, int g,
                                            uint32_t k_dst, int ptid) {
  // A thread copies one 16-byte piece of every kRowsPerPass-th row, so its piece, the
  // piece's swizzled place within a row and the column offset in K/V stay fixed.
  constexpr int kPieces = Tile::kColumnBlocks * 8;  // 16-byte pieces per row
  constexpr int kRowsPerPass = kProducerThreads / kPieces;
  static_assert(kRowsPerPass % 8 == 0, "a fixed row % 8, hence a fixed swizzle");
  const int piece = ptid % kPieces, j0 = ptid / kPieces, b = piece / 8, chunk = piece % 8;
  const uint32_t dst0 = k_dst + b * Tile::kKvBlockBytes + j0 * 128 + ((chunk ^ (j0 % 8)) << 4);
  const int64_t column_bytes = (static_cast<int64_t>(g) * Tile::kHeadDim + b * 64 + chunk * 8) * 2;
  const char* const k = static_cast<const char*>(p.k) + column_bytes;
  const char* const v = static_cast<const char*>(p.v) + column_bytes;
  const int64_t row_bytes = static_cast<int64_t>(p.num_kv_heads) * Tile::kHeadDim * 2;
  for (int j = j0; j < kChunkKeys; j += kRowsPerPass) {
    int64_t row = -1;
    if (j < c.count) row = c.kind == kRange ? c.first + j : p.columns[2 * (c.first + j)];
    const bool valid = row >= 0 && row < p.n_kv;
    const int64_t src = valid ? row * row_bytes : 0;
    const uint32_t dst = dst0 + (j - j0) * 128;
    ai::CpAsync16(dst, k + src, valid);
    ai::CpAsync16(dst + Tile::kKvBytes, v + src, valid);
  }
}

// The producer warpgroup: tile t goes to stage t % kStages once the consumers have released the
// tile that stage held before. Its first thread resolves the stage's two chunks, announces the
// TMA bytes and issues the TMA loads; then every thread gathers its share of the other chunks
// and arrives once its copies have landed (the full barrier expects 1 + kProducerThreads
// arrivals).
template <typename Tile>
__device__ __forceinline__ void ProduceTiles(const SparseAttentionParams& p, const ItemKeys& keys,
                                             int64_t visible_columns, int g, int num_tiles,
                                             StageChunk* chunks, uint32_t kv_base,
                                             uint32_t full_bar, uint32_t empty_bar,
                                             const CUtensorMap* k_map, const CUtensorMap* v_map) {
  constexpr int kStages = Tile::kStages;
  const int ptid = threadIdx.x - kConsumerThreads;
  ChunkCursor cursor{keys.range_begin, 0, keys.column_begin, keys.column_begin + visible_columns};
  for (int tile = 0; tile < num_tiles; ++tile) {
    const int stage = tile % kStages;
    if (tile >= kStages) ai::MbarrierWait(empty_bar + 8 * stage, (tile / kStages - 1) & 1);
    StageChunk* const pair = chunks + 2 * stage;
    const uint32_t k_tile = kv_base + stage * Tile::kStageBytes, bar = full_bar + 8 * stage;
    if (ptid == 0) {
      const Chunk c[2] = {cursor.Next(p, keys), cursor.Next(p, keys)};
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        pair[h].chunk = c[h];
        if (c[h].kind == kColumns && c[h].max_pos > keys.first_pos)
          for (int j = 0; j < c[h].count; ++j)
            pair[h].rel[j] = RelativePosition(p.columns[2 * (c[h].first + j) + 1], keys.first_pos);
      }
      ai::MbarrierArriveExpectTx(bar, (ByTma(c[0]) + ByTma(c[1])) * Tile::kChunkTmaBytes);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (!ByTma(c[h])) continue;
        const int y = static_cast<int>(c[h].first);
#pragma unroll
        for (int b = 0; b < Tile::kColumnBlocks; ++b) {
          const uint32_t dst = k_tile + b * Tile::kKvBlockBytes + h * Tile::kChunkBytes;
          const int x = g * Tile::kHeadDim + b * 64;
          ai::TmaLoad2d(dst, k_map, x, y, bar);
          ai::TmaLoad2d(dst + Tile::kKvBytes, v_map, x, y, bar);
        }
      }
    }
    ai::NamedBarrierSync(kProducerBarrier, kProducerThreads);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const Chunk c = pair[h].chunk;
      if (!ByTma(c)) GatherChunk<Tile>(p, c, g, k_tile + h * Tile::kChunkBytes, ptid);
    }
    ai::CpAsyncMbarrierArrive(bar);
  }
  // Leave no copy in flight behind an exited thread.
  ai::CpAsyncCommit();
  ai::CpAsyncWaitAll();
}

// Sets the scores of keys a row may not see to -inf. Thread column 8 j + 2 (lane % 4) + e % 2
// of s[4 j + e] (row e / 2) is slot 8 (j % 8) + 2 (lane % 4) + e % 2 of chunk j / 8. row_rel:
// the rows' positions relative to the tile's first (INT_MAX for rows past the item's: never
// masked, their output is not written).
__device__ __forceinline__ void MaskTile(const StageChunk* pair, int64_t first_pos,
                                         const int (&row_rel)[2], float (&s)[ai::kWgmmaKeys / 2]) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const Chunk& c = pair[h].chunk;
    const int count = c.count;
    const int64_t max_pos = c.max_pos;
    if (count == kChunkKeys && max_pos <= first_pos) continue;  // every row sees every key
    // Slot positions: a range's are consecutive; columns after the tile's first position come
    // one by one; other columns are before every row.
    const bool per_slot = c.kind == kColumns && max_pos > first_pos;
    const int base = c.kind == kRange ? RelativePosition(c.pos, first_pos) : -(1 << 30);
#pragma unroll
    for (int jj = 0; jj < 8; ++jj)
#pragma unroll
      for (int e2 = 0; e2 < 2; ++e2) {
        const int slot = 8 * jj + 2 * (lane % 4) + e2;
        const int rel = slot >= count ? INT_MAX : per_slot ? pair[h].rel[slot] : base + slot;
#pragma unroll
        for (int r = 0; r < 2; ++r)
          if (rel > row_rel[r]) s[4 * (8 * h + jj) + 2 * r + e2] = -INFINITY;
      }
  }
}

}  // namespace millipede::sparse_attention_internal
