// Tensor-core attention for head_dim 64 and 128 with bf16, f16 or fp8 (E4M3) K/V, in the manner
// of FlashAttention-2: a thread block owns a tile of query rows of one kv head (every q head of
// the GQA group, packed), streams 64-key K/V tiles through shared memory with cp.async (two
// stages), computes S = Q K^T and O += P V with mma.sync m16n8k16 and keeps the softmax online
// in fp32 through AttentionState. Optionally one block only sees a split of the keys and writes
// a partial (o, lse) that the launcher merges (Flash-Decoding). FP8 K/V stream in as bytes (half
// the traffic, three stages) and each warp reads its MMA fragments from the byte tiles straight
// into registers, widened to f16 exactly (one conversion per pair) for f16 MMAs: no 16-bit copy
// of a tile and no barrier besides the stage's.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <math.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "common/cuda_check.h"
#include "kernels/attention/attention_cuda_internal.h"
#include "kernels/attention/attention_mma.cuh"
#include "kernels/attention/attention_state.h"

namespace millipede::attention_internal {
namespace {

constexpr int kKeysPerTile = 64;
constexpr float kLog2e = 1.4426950408889634f;
// A split shorter than this many key tiles costs more in setup and merge than it gains.
constexpr int64_t kMinTilesPerSplit = 4;
// Resident split-KV decode blocks per SM the split count aims for (see AttentionFlashSplits).
constexpr int DecodeBlocksPerSm(DType kv_dtype) { return kv_dtype == DType::kF8E4M3 ? 4 : 2; }

// Compile-time shape of one kernel instance.
template <int kHeadDimT, int kRowWarpsT, int kKeyWarpsT, int kMTilesT, int kMinBlocksT>
struct FlashTile {
  static constexpr int kHeadDim = kHeadDimT;
  static constexpr int kRowWarps = kRowWarpsT;    // warps side by side over the query rows
  static constexpr int kKeyWarps = kKeyWarpsT;    // warps side by side over each tile's keys
  static constexpr int kMTiles = kMTilesT;        // 16-row MMA tiles per warp
  static constexpr int kMinBlocks = kMinBlocksT;  // residency asked of __launch_bounds__
  static constexpr int kThreads = 32 * kRowWarps * kKeyWarps;
  static constexpr int kWarpRows = 16 * kMTiles;
  static constexpr int kRows = kWarpRows * kRowWarps;
  static constexpr int kKeys = kKeysPerTile;
  static constexpr int kWarpKeys = kKeys / kKeyWarps;
  static constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks in a row of 16-bit values
  static constexpr int kQElems = kRows * kHeadDim;
  static constexpr int kKvElems = kKeys * kHeadDim;  // one tensor, one stage
  // Q tile + two stages of (K tile, V tile), all 16-bit.
  static constexpr int kSmemBytes = (kQElems + 4 * kKvElems) * 2;
  // FP8 K/V: Q tile + kStages8 byte stages (kStages8 - 1 tile pairs in flight). Three stages
  // let four decode blocks share an SM (four stages allowed three): on an H200 that read 1M keys
  // in 526.8 against 553.2 us (one 32-head layer).
  static constexpr int kStages8 = 3;
  static constexpr int kSmemBytes8 = kQElems * 2 + kStages8 * 2 * kKvElems;
  static_assert(kHeadDim % 16 == 0 && kWarpKeys % 16 == 0, "MMA tiles are 16 wide");
  static_assert(kThreads % kChunks == 0 && (kThreads / kChunks) % 8 == 0 &&
                    kKeys % (kThreads / kChunks) == 0,
                "each thread copies one chunk column, at rows of the same row % 8");
  static_assert((kKeyWarps - 1) * kRows * (kHeadDim + 2) * 4 <=
                    std::min(4 * kKvElems * 2, kStages8 * 2 * kKvElems),
                "the key warps' partials must fit in the K/V buffers they replace");
};

// Prefill: 4 warps of 32 rows, so each K/V fragment read from shared memory feeds two MMA row
// tiles: half the ldmatrix traffic per MMA of 16-row warps, which matters because shared-memory
// bandwidth rather than the tensor cores bounds mma.sync attention on Hopper. Costs up to 255
// registers (no spills), hence 2 blocks per SM.
// Decode: one 16-row tile and 4 warps that each take 16 keys of every 64-key tile, so that a
// block of few rows still keeps 4 warps busy; 3 blocks per SM (shared memory; FP8: 4).
template <int kHeadDim, AttentionFlashShape kShape>
struct TileFor;
template <int kHeadDim>
struct TileFor<kHeadDim, AttentionFlashShape::kPrefill> {
  using Type = FlashTile<kHeadDim, 4, 1, 2, 2>;
};
template <int kHeadDim>
struct TileFor<kHeadDim, AttentionFlashShape::kDecode> {
  using Type = FlashTile<kHeadDim, 1, 4, 1, 4>;
};

// Element offset of 16-byte chunk `chunk` of row `row` in a [rows][kHeadDim] 16-bit tile. XOR-ing
// the chunk with row % 8 spreads one chunk of 8 consecutive rows over all 32 banks, so ldmatrix
// (8 rows, one chunk each) runs without conflicts and without padding.
template <int kHeadDim>
__device__ __forceinline__ int Swizzle(int row, int chunk) {
  return row * kHeadDim + ((chunk ^ (row & 7)) << 3);
}

// FP8 tiles are read from the byte stage straight into MMA fragments. Two reorderings make each
// lane's fragment bytes contiguous (lane = 4g + c, fragment layouts in attention_mma.cuh):
// - S = Q K^T sums over the dims in any order. The MMAs take them in the order in which lane
//   (g, c) finds its B fragments of 16-dim steps 2j and 2j + 1 in the 8 bytes from dim 32j + 8c
//   of its key row g: bytes 0-1 and 2-3 are step 2j's k 2c..2c+1 and 2c+8..2c+9, bytes 4-7 step
//   2j + 1's. The Q tile is stored in that order: its column `col` holds dim Fp8KeyDim(col).
// - O = P V: column n of the MMA's 8-dim tile dt is dim n * kHeadDim / 8 + dt, so lane (g, c)
//   finds its B fragments of all dim tiles in the kHeadDim / 8 bytes from dim g * kHeadDim / 8 of
//   its four key rows (2c, 2c + 1, 2c + 8, 2c + 9 of a 16-key step); O is stored back in order.
__device__ __forceinline__ constexpr int Fp8KeyDim(int col) {
  const int step = col / 16, k = col % 16;
  return 32 * (step / 2) + 4 * (step % 2) + 8 * ((k % 8) / 2) + 2 * (k / 8) + k % 2;
}

// Columns 8 * chunk .. 8 * chunk + 7 of the F32 q row `row` in the FP8 key order, as eight f16:
// one 16-byte chunk of a Q tile row.
__device__ __forceinline__ uint4 PackQChunkFp8Order(const float* row, int chunk) {
  uint32_t h[4];
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    const float2 x = __ldg(reinterpret_cast<const float2*>(row + Fp8KeyDim(8 * chunk + 2 * m)));
    h[m] = MmaType<__half>::Pack(x.x, x.y);
  }
  return make_uint4(h[0], h[1], h[2], h[3]);
}

// Position of 16-byte chunk `chunk` of row `row` in an FP8 K or V byte tile ([kKeys][kHeadDim],
// kChunks = kHeadDim / 16 chunks a row). The XORs keep the fragment reads free of bank conflicts
// at head_dim 128: a K read (8 bytes a lane) covers rows g = 0..3 in one phase, a V read (16
// bytes a lane) rows 2c (+ 0, 1, 8 or 9) and two columns g. Copies of the same row % 8 share
// the XOR.
template <int kChunks>
__device__ __forceinline__ int Fp8KChunk(int row, int chunk) {
  return chunk ^ ((2 * (row & 3)) & (kChunks - 1));
}
template <int kChunks>
__device__ __forceinline__ int Fp8VChunk(int row, int chunk) {
  return chunk ^ ((row & 6) & (kChunks - 1));
}

// One thread block's work: packed query rows [row0, min(row0 + Tile::kRows, rows)) of KV head
// blockIdx.y against keys [0, key_rows) of `k_base`/`v_base` ([key_rows, num_kv_heads,
// head_dim]), split blockIdx.z of them; query row t sits at key row t + window_shift (A-shape
// windows) and reads row t + q_shift of p.q (its output stays at row t). With `row_index`
// ([key_rows, num_kv_heads] I64, flat rows of K/V viewed as [rows * num_kv_heads, head_dim]) key
// j of KV head g is flat row row_index[j][g]. Tile::kThreads threads; Tile::kSmemBytes (FP8:
// Tile::kSmemBytes8) of dynamic shared memory. K/V are stored as S: T itself, or __nv_fp8_e4m3
// read as T (f16) fragments.
template <typename Tile, typename T, typename S>
__device__ __forceinline__ void AttentionFlashBlock(
    const AttentionKernelParams& p, const int64_t row0, const int64_t rows,
    const void* const k_base, const void* const v_base, const int64_t key_rows,
    const int64_t window_shift, const int64_t q_shift = 0,
    const int64_t* const row_index = nullptr) {
  constexpr int kHeadDim = Tile::kHeadDim, kMTiles = Tile::kMTiles, kKeys = Tile::kKeys;
  constexpr int kWarpKeys = Tile::kWarpKeys, kChunks = Tile::kChunks;
  constexpr int kRowBytes = kHeadDim * 2;
  constexpr int kKvBytes = Tile::kKvElems * 2;  // one K or V tile
  constexpr int kStageBytes = 2 * kKvBytes;
  using Mma = MmaType<T>;
  // FP8 K/V: Tile::kStages8 stages of byte tiles, filled by cp.async, read by the MMA warps.
  constexpr bool kFp8 = !std::is_same_v<S, T>;
  static_assert(!kFp8 || (std::is_same_v<S, __nv_fp8_e4m3> && std::is_same_v<T, __half>));
  constexpr int kStageBytes8 = 2 * Tile::kKvElems;  // FP8: one stage, K and V
  extern __shared__ __align__(16) unsigned char smem[];
  T* const sq = reinterpret_cast<T*>(smem);  // [kRows][kHeadDim]
  T* const skv = sq + Tile::kQElems;         // [2 stages][K, V][kKeys][kHeadDim]
  // FP8 instead: [Tile::kStages8][K, V][kKeys][kHeadDim] bytes.
  unsigned char* const sstage = reinterpret_cast<unsigned char*>(skv);

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int row_warp = warp % Tile::kRowWarps, key_warp = warp / Tile::kRowWarps;
  const int kv_head = blockIdx.y, split = blockIdx.z;
  const int64_t block_last_row = min(row0 + Tile::kRows, rows) - 1;

  const SplitKeys keys(p, split, key_rows);
  const int key_begin = keys.begin;
  auto row_key_end = [&](int64_t row) { return keys.RowEnd(p, row); };
  // Causal tile skipping: nothing after the block's last query is loaded at all.
  const int key_end = row_key_end(block_last_row);
  // A-shape heads: keys between the sinks and the block's earliest window are not loaded either.
  const int window = WindowOf(p, kv_head);
  const KeyTiles tiles(key_begin, key_end, kKeys, window > 0 ? p.sink_rows : 0,
                       WindowStart(p, window, row0, window_shift));
  if (key_end <= key_begin || tiles.count == 0) {
    WriteEmptyRows(p, row0, block_last_row, kv_head, split, Tile::kThreads);
    return;
  }

  // K/V copies: each thread moves chunk tid % kChunks of rows tid / kChunks + n * kRowsPerPass.
  constexpr int kRowsPerPass = Tile::kThreads / kChunks;
  const int copy_row = threadIdx.x / kChunks, copy_chunk = threadIdx.x % kChunks;
  const uint32_t copy_dst =
      SharedAddress(skv) + Swizzle<kHeadDim>(copy_row, copy_chunk) * 2;  // rows keep row % 8
  const int64_t kv_row_stride = static_cast<int64_t>(p.num_kv_heads) * kHeadDim;
  const T* const k_src = static_cast<const T*>(k_base) + kv_head * kHeadDim + copy_chunk * 8;
  const T* const v_src = static_cast<const T*>(v_base) + kv_head * kHeadDim + copy_chunk * 8;
  // Elements from KV head kv_head's row 0 to key `key` (valid: below key_end). An indexed entry's
  // key `key` is row row_index[key * kv_heads + kv_head] of K/V viewed as [rows * kv_heads,
  // head_dim], i.e. that flat row less kv_head from the head's row 0.
  auto key_offset = [&](int key, bool valid) -> int64_t {
    return !valid ? 0
           : row_index == nullptr
               ? key * kv_row_stride
               : (row_index[static_cast<int64_t>(key) * p.num_kv_heads + kv_head] - kv_head) *
                     kHeadDim;
  };
  auto load_tile_16 = [&](int tile_key0, int stage) {
    const uint32_t dst = copy_dst + stage * kStageBytes;
#pragma unroll
    for (int n = 0; n < kKeys / kRowsPerPass; ++n) {
      const int key = tile_key0 + copy_row + n * kRowsPerPass;
      const bool valid = key < key_end;
      const int64_t offset = key_offset(key, valid);
      CpAsync16(dst + n * kRowsPerPass * kRowBytes, k_src + offset, valid);
      CpAsync16(dst + kKvBytes + n * kRowsPerPass * kRowBytes, v_src + offset, valid);
    }
    CpAsyncCommit();
  };

  // FP8: chunks of 16 elements, into the byte stage at their swizzled positions.
  constexpr int kChunks8 = kHeadDim / 16;
  constexpr int kRowsPerPass8 = Tile::kThreads / kChunks8;
  static_assert(kKeys % kRowsPerPass8 == 0 && kRowsPerPass8 % 8 == 0,
                "each thread copies whole passes of rows, all of the same row % 8");
  const int copy_row8 = threadIdx.x / kChunks8, copy_chunk8 = threadIdx.x % kChunks8;
  auto load_tile_8 = [&](int tile_key0, int stage) {
    const uint32_t dst = SharedAddress(sstage) + stage * kStageBytes8 + copy_row8 * kHeadDim;
    const uint32_t k_dst = dst + Fp8KChunk<kChunks8>(copy_row8, copy_chunk8) * 16;
    const uint32_t v_dst = dst + Tile::kKvElems + Fp8VChunk<kChunks8>(copy_row8, copy_chunk8) * 16;
    const S* const k8 = static_cast<const S*>(k_base) + kv_head * kHeadDim + copy_chunk8 * 16;
    const S* const v8 = static_cast<const S*>(v_base) + kv_head * kHeadDim + copy_chunk8 * 16;
#pragma unroll
    for (int n = 0; n < kKeys / kRowsPerPass8; ++n) {
      const int key = tile_key0 + copy_row8 + n * kRowsPerPass8;
      const bool valid = key < key_end;
      const int64_t offset = key_offset(key, valid);
      CpAsync16(k_dst + n * kRowsPerPass8 * kHeadDim, k8 + offset, valid);
      CpAsync16(v_dst + n * kRowsPerPass8 * kHeadDim, v8 + offset, valid);
    }
    CpAsyncCommit();
  };
  auto load_tile = [&](int tile_key0, int stage) {
    if constexpr (kFp8) {
      load_tile_8(tile_key0, stage);
    } else {
      load_tile_16(tile_key0, stage);
    }
  };

  // The first K/V tile (FP8: the first kStages8 - 1) streams in while the Q tile is converted.
  // FP8 commits a group per tile even past the last, so that the waits below count alike.
  constexpr int kAhead = kFp8 ? Tile::kStages8 - 1 : 1;
  for (int t = 0; t < kAhead; ++t) {
    if (t < tiles.count) {
      load_tile(tiles.Key0(t, kKeys), t);
    } else {
      CpAsyncCommit();
    }
  }
  // Q tile, converted from F32 to T once (its precision cost is documented in attention_cuda.h).
  for (int i = threadIdx.x; i < Tile::kRows * kChunks; i += Tile::kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const int64_t row = row0 + r;
    uint4 packed = make_uint4(0, 0, 0, 0);
    if (row < rows) {
      const float* const q_row =
          p.q + (OutputRow(p, row, kv_head, 0) + q_shift * p.num_q_heads) * kHeadDim;
      packed = kFp8 ? PackQChunkFp8Order(q_row, c) : PackQChunk<T>(q_row + 8 * c);
    }
    *reinterpret_cast<uint4*>(sq + Swizzle<kHeadDim>(r, c)) = packed;
  }

  // ldmatrix row addresses. Every lane's row r has r % 8 == lane % 8 (fragments start at
  // multiples of 8 rows) and its chunk is 2 * step + bit, with a per-lane bit and a compile-time
  // step, so by the swizzle its byte address is row_base + (((bit ^ lane % 8) * 16) ^ (step * 32)):
  // one XOR per step instead of one address register per fragment.
  const int slice_row0 = key_warp * kWarpKeys;  // first key of the warp's slice, as a tile row
  const uint32_t q_row_addr =
      SharedAddress(sq) + (row_warp * Tile::kWarpRows + lane % 8 + (lane / 8) % 2 * 8) * kRowBytes;
  const uint32_t q_chunk = ((lane / 16) ^ (lane % 8)) * 16;
  const uint32_t k_row_addr =
      SharedAddress(skv) + (slice_row0 + lane % 8 + lane / 16 * 8) * kRowBytes;
  const uint32_t k_chunk = (((lane / 8) % 2) ^ (lane % 8)) * 16;
  const uint32_t v_row_addr =
      SharedAddress(skv) + kKvBytes + (slice_row0 + lane % 8 + (lane / 8) % 2 * 8) * kRowBytes;
  const uint32_t v_chunk = q_chunk;
  // FP8 fragment bytes of this lane (g, c) in a stage (see Fp8KeyDim): K row slice_row0 + g (+ 8
  // per 8-key tile) from byte 8c of 32-byte group j ^ k8_xor; V rows slice_row0 + 2c (+ 1, 8, 9;
  // + 16 per 16-key step) from dim g * kDimTiles8, in chunk (g * kDimTiles8 / 16) ^ v8_xor.
  constexpr int kDimTiles8 = kHeadDim / 8;  // bytes of a V row per lane
  const int frag_g = lane / 4, frag_c = lane % 4;
  const int k8_xor = Fp8KChunk<kChunks8>(frag_g, 0) / 2;
  const int k8_offset = (slice_row0 + frag_g) * kHeadDim + 8 * frag_c;
  const int v8_dim = frag_g * kDimTiles8;
  const int v8_offset = Tile::kKvElems + (slice_row0 + 2 * frag_c) * kHeadDim +
                        Fp8VChunk<kChunks8>(2 * frag_c, v8_dim / 16) * 16 + v8_dim % 16;

  // This thread holds rows g and g + 8 (g = lane / 4) of each of its warp's MMA row tiles.
  const int64_t warp_row0 = row0 + row_warp * Tile::kWarpRows;
  int row_end[kMTiles][2], row_start[kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = warp_row0 + mt * 16 + lane / 4 + 8 * h;
      row_end[mt][h] = row_key_end(row);
      row_start[mt][h] = WindowStart(p, window, row, window_shift);
    }
  // Keys seen by every / by some row of the warp (warp-uniform), and the window starts of its
  // first and last rows.
  const bool warp_has_rows = warp_row0 < rows;
  const int64_t warp_last_row = min(warp_row0 + Tile::kWarpRows, rows) - 1;
  const int warp_all_end = warp_has_rows ? row_key_end(warp_row0) : key_begin;
  const int warp_any_end = warp_has_rows ? row_key_end(warp_last_row) : key_begin;
  const int warp_min_start = WindowStart(p, window, warp_row0, window_shift);
  const int warp_max_start =
      warp_has_rows ? WindowStart(p, window, warp_last_row, window_shift) : 0;

  float acc[kMTiles][kHeadDim / 8][4];
  AttentionState state[kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int dt = 0; dt < kHeadDim / 8; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][dt][e] = 0.0f;
    state[mt][0] = state[mt][1] = AttentionState::Empty();
  }
  const float scale_log2 = p.scale * kLog2e;

  const int num_tiles = tiles.count;
  for (int tile = 0; tile < num_tiles; ++tile) {
    const int tile_key0 = tiles.Key0(tile, kKeys);
    if constexpr (kFp8) {
      CpAsyncWaitGroups<Tile::kStages8 - 2>();  // tile `tile` has landed, later ones may not
    } else {
      CpAsyncWaitAll();
    }
    // Now tile `tile` (and, the first time, the Q tile) is visible to every warp, and every warp
    // is done with tile - 1, whose stage the next copy overwrites.
    __syncthreads();
    if constexpr (kFp8) {
      // The byte stage of tile + kAhead is tile - 1's.
      const int next = tile + kAhead;
      if (next < num_tiles) {
        load_tile(tiles.Key0(next, kKeys), next % Tile::kStages8);
      } else {
        CpAsyncCommit();
      }
    } else if (tile + 1 < num_tiles) {
      load_tile(tiles.Key0(tile + 1, kKeys), (tile + 1) % 2);
    }
    const int warp_key0 = tile_key0 + key_warp * kWarpKeys;
    if (warp_key0 >= warp_any_end) continue;  // every key of the warp's slice is masked
    // ... or hidden by the window from every row of the warp
    if (window > 0 && warp_key0 >= p.sink_rows && warp_key0 + kWarpKeys <= warp_min_start)
      continue;
    const uint32_t stage_offset = (tile % 2) * kStageBytes;
    const unsigned char* const stage8 = sstage + (tile % Tile::kStages8) * kStageBytes8;

    // S = Q K^T over the warp's slice, raw (unscaled) dot products.
    float s[kMTiles][kWarpKeys / 8][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < kWarpKeys / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.0f;
    if constexpr (kFp8) {
      // Two 16-dim steps per 8-byte fragment read (see Fp8KeyDim).
#pragma unroll
      for (int j = 0; j < kHeadDim / 32; ++j) {
        uint32_t a[2][kMTiles][4];
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt)
            Ldmatrix4(a[h][mt], q_row_addr + mt * 16 * kRowBytes + (q_chunk ^ ((2 * j + h) * 32)));
#pragma unroll
        for (int nt = 0; nt < kWarpKeys / 8; ++nt) {
          const uint2 raw = *reinterpret_cast<const uint2*>(stage8 + k8_offset + nt * 8 * kHeadDim +
                                                            (j ^ k8_xor) * 32);
          const uint32_t b[4] = {Fp8PairToHalf2(raw.x), Fp8PairToHalf2(raw.x >> 16),
                                 Fp8PairToHalf2(raw.y), Fp8PairToHalf2(raw.y >> 16)};
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            Mma::Mma(s[mt][nt], a[0][mt], b[0], b[1]);
            Mma::Mma(s[mt][nt], a[1][mt], b[2], b[3]);
          }
        }
      }
    } else {
#pragma unroll
      for (int ks = 0; ks < kHeadDim / 16; ++ks) {
        uint32_t a[kMTiles][4];
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt)
          Ldmatrix4(a[mt], q_row_addr + mt * 16 * kRowBytes + (q_chunk ^ (ks * 32)));
#pragma unroll
        for (int np = 0; np < kWarpKeys / 16; ++np) {
          uint32_t b[4];
          Ldmatrix4(b, k_row_addr + stage_offset + np * 16 * kRowBytes + (k_chunk ^ (ks * 32)));
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            Mma::Mma(s[mt][2 * np], a[mt], b[0], b[1]);
            Mma::Mma(s[mt][2 * np + 1], a[mt], b[2], b[3]);
          }
        }
      }
    }

    // Only tiles on the causal diagonal, at the end of the keys or (A-shape heads) at the start
    // of a window need a mask.
    if (warp_key0 + kWarpKeys > warp_all_end ||
        (window > 0 && warp_key0 < warp_max_start && warp_key0 + kWarpKeys > p.sink_rows)) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int nt = 0; nt < kWarpKeys / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = warp_key0 + nt * 8 + 2 * (lane % 4) + (e & 1);
            if (key >= row_end[mt][e / 2] || OutsideWindow(p, key, row_start[mt][e / 2]))
              s[mt][nt][e] = -INFINITY;
          }
    }

    // Online softmax. The tile's state is taken relative to m_ref, the larger of the running max
    // and the tile's max, so Merge() keeps m_ref as the max and returns a factor of exactly 1
    // for the tile (0 when both are empty, where P is 0): P.V is added unscaled below, after the
    // running accumulator is rescaled by f.self. m_ref is uniform across the quad of lanes that
    // share a row, while each lane's d only sums its own columns; Merge() is linear in d, so
    // adding the quad's d at the end gives the row's. exp() is exp2() with log2(e) folded into
    // one FMA with the scale.
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float tile_max = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < kWarpKeys / 8; ++nt)
          tile_max = fmaxf(tile_max, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
        const float m_ref = fmaxf(state[mt][h].m, tile_max * p.scale);
        // An all-masked row (m_ref = -inf) must give exp2(-inf) = 0, not exp2(NaN).
        const float m_ref_log2 = m_ref == -INFINITY ? 0.0f : m_ref * kLog2e;
        float sum = 0.0f;
#pragma unroll
        for (int nt = 0; nt < kWarpKeys / 8; ++nt)
#pragma unroll
          for (int e = 2 * h; e < 2 * h + 2; ++e) {
            s[mt][nt][e] = exp2f(fmaf(s[mt][nt][e], scale_log2, -m_ref_log2));
            sum += s[mt][nt][e];
          }
        const AttentionState::Factors f = state[mt][h].Merge(AttentionState{m_ref, sum});
#pragma unroll
        for (int dt = 0; dt < kHeadDim / 8; ++dt) {
          acc[mt][dt][2 * h] *= f.self;
          acc[mt][dt][2 * h + 1] *= f.self;
        }
      }
    }

    // O += P V: the S accumulators of two 8-key tiles form the A fragment of a 16-key step.
#pragma unroll
    for (int kk = 0; kk < kWarpKeys / 16; ++kk) {
      uint32_t pa[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        pa[mt][0] = Mma::Pack(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        pa[mt][1] = Mma::Pack(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        pa[mt][2] = Mma::Pack(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        pa[mt][3] = Mma::Pack(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
      if constexpr (kFp8) {
        // Words w of the lane's four key rows (see Fp8KeyDim); byte q of a word is dim tile
        // 4w + q. A byte permutation pairs keys 2c, 2c + 1 (and 2c + 8, 2c + 9) per dim tile.
        constexpr int kWords = kDimTiles8 / 4;
        uint32_t x[4][kWords];
        constexpr int kRowOffsets[4] = {0, 1, 8, 9};
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const unsigned char* const src =
              stage8 + v8_offset + (kk * 16 + kRowOffsets[r]) * kHeadDim;
          if constexpr (kWords == 4) {
            const uint4 w = *reinterpret_cast<const uint4*>(src);
            x[r][0] = w.x, x[r][1] = w.y, x[r][2] = w.z, x[r][3] = w.w;
          } else {
            static_assert(kWords == 2);
            const uint2 w = *reinterpret_cast<const uint2*>(src);
            x[r][0] = w.x, x[r][1] = w.y;
          }
        }
#pragma unroll
        for (int w = 0; w < kWords; ++w) {
          // pairs[h][q]: keys (2c, 2c + 1) for h = 0, (2c + 8, 2c + 9) for h = 1, of dim tiles
          // 4w + q (q = 0, 1 in the low word's halves, 2, 3 in the high's).
          const uint32_t pairs[2][2] = {
              {__byte_perm(x[0][w], x[1][w], 0x5140), __byte_perm(x[0][w], x[1][w], 0x7362)},
              {__byte_perm(x[2][w], x[3][w], 0x5140), __byte_perm(x[2][w], x[3][w], 0x7362)}};
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            const uint32_t b0 = Fp8PairToHalf2(pairs[0][q / 2] >> (16 * (q % 2)));
            const uint32_t b1 = Fp8PairToHalf2(pairs[1][q / 2] >> (16 * (q % 2)));
#pragma unroll
            for (int mt = 0; mt < kMTiles; ++mt) Mma::Mma(acc[mt][4 * w + q], pa[mt], b0, b1);
          }
        }
      } else {
#pragma unroll
        for (int np = 0; np < kHeadDim / 16; ++np) {
          uint32_t b[4];
          Ldmatrix4Trans(b,
                         v_row_addr + stage_offset + kk * 16 * kRowBytes + (v_chunk ^ (np * 32)));
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            Mma::Mma(acc[mt][2 * np], pa[mt], b[0], b[1]);
            Mma::Mma(acc[mt][2 * np + 1], pa[mt], b[2], b[3]);
          }
        }
      }
    }
  }

#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float& d = state[mt][h].d;
      d += __shfl_xor_sync(0xffffffffu, d, 1);
      d += __shfl_xor_sync(0xffffffffu, d, 2);
    }

  if constexpr (Tile::kKeyWarps > 1) {
    // Key warps 1.. hand their partial states to key warp 0 through the K/V buffers.
    float* const part_acc = reinterpret_cast<float*>(skv);  // [kKeyWarps - 1][kRows][kHeadDim]
    float* const part_md = part_acc + (Tile::kKeyWarps - 1) * Tile::kRows * kHeadDim;  // (m, d)
    __syncthreads();  // every warp is done reading K/V
    if (key_warp > 0) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = (key_warp - 1) * Tile::kRows + row_warp * Tile::kWarpRows + mt * 16 +
                        lane / 4 + 8 * h;
#pragma unroll
          for (int dt = 0; dt < kHeadDim / 8; ++dt)
            *reinterpret_cast<float2*>(part_acc + r * kHeadDim + dt * 8 + 2 * (lane % 4)) =
                make_float2(acc[mt][dt][2 * h], acc[mt][dt][2 * h + 1]);
          if (lane % 4 == 0) {
            part_md[2 * r] = state[mt][h].m;
            part_md[2 * r + 1] = state[mt][h].d;
          }
        }
    }
    __syncthreads();
    if (key_warp > 0) return;
    for (int w = 0; w < Tile::kKeyWarps - 1; ++w)
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = w * Tile::kRows + row_warp * Tile::kWarpRows + mt * 16 + lane / 4 + 8 * h;
          const AttentionState::Factors f =
              state[mt][h].Merge(AttentionState{part_md[2 * r], part_md[2 * r + 1]});
#pragma unroll
          for (int dt = 0; dt < kHeadDim / 8; ++dt) {
            const float2 other =
                *reinterpret_cast<const float2*>(part_acc + r * kHeadDim + dt * 8 + 2 * (lane % 4));
            acc[mt][dt][2 * h] = f.Apply(acc[mt][dt][2 * h], other.x);
            acc[mt][dt][2 * h + 1] = f.Apply(acc[mt][dt][2 * h + 1], other.y);
          }
        }
  }

#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = warp_row0 + mt * 16 + lane / 4 + 8 * h;
      if (row >= rows) continue;
      const int64_t out = OutputRow(p, row, kv_head, split);
      const float o_scale = state[mt][h].OutputScale();
      if constexpr (kFp8) {
        // Column n of dim tile dt is dim n * kDimTiles8 + dt: this lane's two columns are two
        // runs of kDimTiles8 dims.
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float* const o = p.o + out * kHeadDim + (2 * (lane % 4) + e) * kDimTiles8;
#pragma unroll
          for (int dt = 0; dt < kDimTiles8; dt += 4)
            *reinterpret_cast<float4*>(o + dt) = make_float4(
                acc[mt][dt][2 * h + e] * o_scale, acc[mt][dt + 1][2 * h + e] * o_scale,
                acc[mt][dt + 2][2 * h + e] * o_scale, acc[mt][dt + 3][2 * h + e] * o_scale);
        }
      } else {
        float* const o = p.o + out * kHeadDim + 2 * (lane % 4);
#pragma unroll
        for (int dt = 0; dt < kHeadDim / 8; ++dt)
          *reinterpret_cast<float2*>(o + dt * 8) =
              make_float2(acc[mt][dt][2 * h] * o_scale, acc[mt][dt][2 * h + 1] * o_scale);
      }
      if (lane % 4 == 0 && p.lse != nullptr) p.lse[out] = state[mt][h].Lse();
    }
}

// Grid: (row blocks, num_kv_heads, num_splits).
template <typename Tile, typename T, typename S>
__global__ void __launch_bounds__(Tile::kThreads, Tile::kMinBlocks)
    AttentionFlashKernel(const __grid_constant__ AttentionKernelParams p) {
  // Causal blocks of late rows see the most keys; launching them first lets the light ones
  // fill the tail of the grid.
  const int64_t row0 = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * Tile::kRows;
  AttentionFlashBlock<Tile, T, S>(p, row0, p.n_q * p.group, p.k, p.v, KeyRowsOf(p, blockIdx.y),
                                  p.causal_shift);
}

// Grid: (entries, num_kv_heads, num_splits): block (b, g, s) runs query row batch.q_row[b] (entry
// b's token, its group's heads packed into the tile's first p.group rows) against that entry's
// keys (KV head g's first batch.head_rows[b][g] when given; through batch.row_index[b] when
// given), the token at its last key's position (for the windows); its output is row b.
// p.group <= Tile::kRows.
template <typename Tile, typename T, typename S>
__global__ void __launch_bounds__(Tile::kThreads, Tile::kMinBlocks)
    AttentionFlashBatchKernel(const __grid_constant__ AttentionKernelParams p,
                              const __grid_constant__ AttentionBatchTable batch) {
  const int b = blockIdx.x;
  const int64_t n_kv = batch.lengths == nullptr
                           ? batch.n_kv[b]
                           : min(batch.n_kv[b], max(int64_t{0}, batch.lengths[b]));
  const int32_t* const head_rows = batch.head_rows[b];
  const int64_t key_rows =
      head_rows == nullptr
          ? n_kv
          : min(n_kv, max(int64_t{0}, static_cast<int64_t>(head_rows[blockIdx.y])));
  AttentionFlashBlock<Tile, T, S>(p, int64_t{b} * p.group, int64_t{b + 1} * p.group, batch.k[b],
                                  batch.v[b], key_rows, n_kv - 1 - b, batch.q_row[b] - b,
                                  batch.row_index[b]);
}

// One kernel instance and its launch shape.
struct FlashInstance {
  void (*kernel)(AttentionKernelParams);
  int threads;
  int smem_bytes;
  int rows;  // query rows (packed) per block
};

template <typename Tile, typename T, typename S>
FlashInstance Instance() {
  return {&AttentionFlashKernel<Tile, T, S>, Tile::kThreads,
          std::is_same_v<S, T> ? Tile::kSmemBytes : Tile::kSmemBytes8, Tile::kRows};
}

// The instances: head_dim {64, 128} x {bf16, f16, fp8 read as f16} x {kPrefill, kDecode}.
template <int kHeadDim, typename T, typename S>
FlashInstance InstanceOfShape(AttentionFlashShape shape) {
  return shape == AttentionFlashShape::kPrefill
             ? Instance<typename TileFor<kHeadDim, AttentionFlashShape::kPrefill>::Type, T, S>()
             : Instance<typename TileFor<kHeadDim, AttentionFlashShape::kDecode>::Type, T, S>();
}
template <int kHeadDim>
FlashInstance InstanceOfType(DType dtype, AttentionFlashShape shape) {
  switch (dtype) {
    case DType::kF16:
      return InstanceOfShape<kHeadDim, __half, __half>(shape);
    case DType::kF8E4M3:
      return InstanceOfShape<kHeadDim, __half, __nv_fp8_e4m3>(shape);
    default:
      return InstanceOfShape<kHeadDim, __nv_bfloat16, __nv_bfloat16>(shape);
  }
}

// The batched decode instances: head_dim {64, 128} x {bf16, f16, fp8}.
using BatchKernel = void (*)(AttentionKernelParams, AttentionBatchTable);
template <int kHeadDim>
BatchKernel BatchKernelOfType(DType dtype) {
  using Tile = typename TileFor<kHeadDim, AttentionFlashShape::kDecode>::Type;
  switch (dtype) {
    case DType::kF16:
      return &AttentionFlashBatchKernel<Tile, __half, __half>;
    case DType::kF8E4M3:
      return &AttentionFlashBatchKernel<Tile, __half, __nv_fp8_e4m3>;
    default:
      return &AttentionFlashBatchKernel<Tile, __nv_bfloat16, __nv_bfloat16>;
  }
}

// 0, 1, 2 for the K/V types of the instances: bf16, f16, fp8.
int TypeSlot(DType dtype) { return dtype == DType::kF16 ? 1 : dtype == DType::kF8E4M3 ? 2 : 0; }

// An instance ready to launch on the current device, and how many of its blocks an SM holds.
struct PreparedInstance {
  FlashInstance instance;
  int blocks_per_sm;
};

constexpr int kMaxCachedDevices = 64;
constexpr int kNumInstances = 18;  // 12 of AttentionFlashKernel, 6 of AttentionFlashBatchKernel

// Resident blocks per SM of `kernel` (a launch shape of `instance`), with its shared-memory limit
// raised. That is per device and, with the occupancy query, costs driver calls: both happen once
// per device and instance (`slot`), so a decode step pays only for its launches.
template <typename Kernel>
StatusOr<int> PrepareKernel(Kernel kernel, const FlashInstance& instance, int slot) {
  int device = 0;
  MP_CUDA_CHECK(cudaGetDevice(&device));
  // 0 until prepared; concurrent first calls both prepare, which is harmless.
  static std::atomic<int> cached_blocks[kMaxCachedDevices][kNumInstances];
  const bool cacheable = device >= 0 && device < kMaxCachedDevices;
  if (cacheable) {
    const int blocks = cached_blocks[device][slot].load(std::memory_order_acquire);
    if (blocks > 0) return blocks;
  }
  MP_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     instance.smem_bytes));
  int blocks = 0;
  MP_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, instance.threads,
                                                              instance.smem_bytes));
  MP_ASSERT(blocks > 0, "an attention block does not fit on an SM");
  if (cacheable) cached_blocks[device][slot].store(blocks, std::memory_order_release);
  return blocks;
}

StatusOr<PreparedInstance> Prepare(int head_dim, DType dtype, AttentionFlashShape shape) {
  MP_ASSERT(AttentionFlashSupports(head_dim, dtype, dtype));
  const FlashInstance instance =
      head_dim == 64 ? InstanceOfType<64>(dtype, shape) : InstanceOfType<128>(dtype, shape);
  const int slot = (head_dim == 128 ? 6 : 0) + 2 * TypeSlot(dtype) +
                   (shape == AttentionFlashShape::kDecode ? 1 : 0);
  MP_ASSIGN_OR_RETURN(const int blocks, PrepareKernel(instance.kernel, instance, slot));
  return PreparedInstance{instance, blocks};
}

}  // namespace

bool AttentionFlashSupports(int head_dim, DType k_dtype, DType v_dtype) {
  return (head_dim == 64 || head_dim == 128) && k_dtype == v_dtype &&
         (k_dtype == DType::kBF16 || k_dtype == DType::kF16 || k_dtype == DType::kF8E4M3);
}

int AttentionFlashRowsPerBlock(AttentionFlashShape shape) {
  return InstanceOfType<64>(DType::kBF16, shape).rows;
}

int AttentionFlashKeysPerTile() { return kKeysPerTile; }

StatusOr<int> AttentionFlashBlocksPerSm(int head_dim, DType kv_dtype, AttentionFlashShape shape) {
  MP_ASSIGN_OR_RETURN(const PreparedInstance prepared, Prepare(head_dim, kv_dtype, shape));
  return prepared.blocks_per_sm;
}

StatusOr<int64_t> AttentionFlashSplits(int head_dim, DType kv_dtype, AttentionFlashShape shape,
                                       int64_t blocks, int64_t tiles) {
  int device = 0, sms = 0;
  MP_CUDA_CHECK(cudaGetDevice(&device));
  MP_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  MP_ASSIGN_OR_RETURN(const int per_sm, AttentionFlashBlocksPerSm(head_dim, kv_dtype, shape));
  // Enough splits to fill one wave of resident blocks, no more: the grid then runs in a single
  // wave and the merge reads as few partials as possible. 16-bit decode fills 2 of its (up to
  // 3) resident slots per SM: on an H200 that read the cache 4-13% faster at 32K-1M than 3
  // (one 32-head layer: 140 vs 146 us at 128K, 51 vs 59 us at 32K). FP8 decode, half the bytes
  // per tile for the same MMA work, fills its 4: 526.8 vs 555.7 us (3) at 1M, 281.4 vs 291.4 us
  // at 512K.
  const int64_t used_per_sm = shape == AttentionFlashShape::kDecode
                                  ? std::min(per_sm, DecodeBlocksPerSm(kv_dtype))
                                  : per_sm;
  const int64_t slots = static_cast<int64_t>(sms) * std::max<int64_t>(used_per_sm, 1);
  if (blocks == 0 || blocks >= slots) return 1;
  return std::clamp<int64_t>(slots / blocks, 1, std::max<int64_t>(1, tiles / kMinTilesPerSplit));
}

Status LaunchAttentionFlashBatch(const AttentionKernelParams& params,
                                 const AttentionBatchTable& batch, cudaStream_t stream) {
  MP_ASSERT(params.k_dtype == params.v_dtype && !params.causal &&
            params.kv_head_rows == nullptr && params.n_q <= AttentionBatchTable::kMaxEntries);
  const AttentionFlashShape shape = AttentionFlashShape::kDecode;
  MP_ASSERT(AttentionFlashSupports(params.head_dim, params.k_dtype, params.v_dtype));
  const FlashInstance instance = params.head_dim == 64 ? InstanceOfType<64>(params.k_dtype, shape)
                                                       : InstanceOfType<128>(params.k_dtype, shape);
  MP_ASSERT(params.group <= instance.rows, "a batched decode block holds one token's heads");
  const BatchKernel kernel = params.head_dim == 64 ? BatchKernelOfType<64>(params.k_dtype)
                                                   : BatchKernelOfType<128>(params.k_dtype);
  const int slot = 12 + (params.head_dim == 128 ? 3 : 0) + TypeSlot(params.k_dtype);
  MP_RETURN_IF_ERROR(PrepareKernel(kernel, instance, slot).status());
  const dim3 grid(static_cast<unsigned>(params.n_q), static_cast<unsigned>(params.num_kv_heads),
                  static_cast<unsigned>(params.num_splits));
  kernel<<<grid, instance.threads, instance.smem_bytes, stream>>>(params, batch);
  MP_CUDA_CHECK_LAUNCH();
  return OkStatus();
}

Status LaunchAttentionFlash(const AttentionKernelParams& params, AttentionFlashShape shape,
                            cudaStream_t stream) {
  MP_ASSERT(params.k_dtype == params.v_dtype);
  MP_ASSIGN_OR_RETURN(const PreparedInstance prepared,
                      Prepare(params.head_dim, params.k_dtype, shape));
  const FlashInstance& instance = prepared.instance;
  const int64_t row_blocks = (params.n_q * params.group + instance.rows - 1) / instance.rows;
  MP_REQUIRE(row_blocks < (int64_t{1} << 31), "attention: ", params.n_q, " queries is too many");
  const dim3 grid(static_cast<unsigned>(row_blocks), static_cast<unsigned>(params.num_kv_heads),
                  static_cast<unsigned>(params.num_splits));
  instance.kernel<<<grid, instance.threads, instance.smem_bytes, stream>>>(params);
  MP_CUDA_CHECK_LAUNCH();
  return OkStatus();
}

}  // namespace millipede::attention_internal
