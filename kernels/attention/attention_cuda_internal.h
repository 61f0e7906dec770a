// Internal interface between the attention launcher (attention.cu) and its kernels: the Hopper
// wgmma/TMA prefill kernel (attention_wgmma.cu), the mma.sync tensor-core kernel
// (attention_flash.cu) and the CUDA-core fallback (attention_generic.cu). Not part of the public API; include only from those files.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>

#include <cstdint>

#include "common/dtype.h"
#include "common/status.h"
#include "kernels/attention/attention.h"

namespace millipede::attention_internal {

// Everything a kernel needs, resolved on the host. Query rows are numbered per kv head in
// "packed" order r = t * group + (h - kv_head * group), so that one tile of rows covers every q
// head of a GQA group and reads its K/V tile once.
struct AttentionKernelParams {
  const float* q;  // [n_q, num_q_heads, head_dim] F32
  const void* k;   // [n_kv, num_kv_heads, head_dim] of k_dtype
  const void* v;   // [n_kv, num_kv_heads, head_dim] of v_dtype
  // [num_splits, n_q, num_q_heads, head_dim] F32; with num_splits == 1 this is the final o.
  float* o;
  // [num_splits, n_q, num_q_heads] F32 natural-log LSE; null (no LSE wanted) only when
  // num_splits == 1.
  float* lse;
  int64_t n_q = 0;
  int64_t n_kv = 0;
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int group = 1;  // num_q_heads / num_kv_heads
  bool causal = true;
  // q_offset - k_offset: under the causal mask query row t sees keys j <= t + causal_shift.
  int64_t causal_shift = 0;
  float scale = 1.0f;  // softmax scale (natural log domain), > 0
  // Keys [s * keys_per_split, (s + 1) * keys_per_split) go to split s (grid z); a multiple of
  // the kernel's key tile. n_kv rounded up when num_splits == 1.
  int num_splits = 1;
  int64_t keys_per_split = 0;
  DType k_dtype = DType::kBF16;
  DType v_dtype = DType::kBF16;
  // [num_kv_heads] (device memory): KV head g sees keys below kv_head_rows[g] only; null: all.
  const int32_t* kv_head_rows = nullptr;
  // A-shape heads (AttentionArgs::kv_head_window), read only when `windowed`: of the keys above,
  // KV head g with window[g] > 0 sees rows j < sink_rows (the sinks) and rows j with
  // t + causal_shift - j < window[g] (its recent window; query row t).
  static constexpr int kMaxWindowHeads = 64;
  bool windowed = false;
  int64_t sink_rows = 0;  // sink_tokens - k_offset, clamped to [0, n_kv]
  int32_t window[kMaxWindowHeads] = {};
};

// Key splits of `tiles` tiles for `blocks` thread blocks of a Hopper kernel whose shared memory
// takes a whole SM (the dense and FP8 wgmma kernels): one wave is one block per SM, so splits
// fill the SMs the blocks leave idle, with at least 4 tiles per split.
StatusOr<int64_t> OneBlockPerSmSplits(int64_t blocks, int64_t tiles);

// The fields of `args` every launch shares (tensors, shapes, mask, offsets, scale, dtypes); the
// split plan, per-head key counts and windows are the caller's to add (attention.cu).
AttentionKernelParams ShapeParams(const AttentionArgs& args);

// The window of KV head `kv_head` (0: the head sees every key the mask allows).
__device__ __forceinline__ int WindowOf(const AttentionKernelParams& p, int kv_head) {
  return p.windowed ? p.window[kv_head] : 0;
}

// The first key row past the sinks that packed query row `row` of a head with window `window`
// sees (0 without a window); monotone in row. Query row t sits at key row t + shift
// (p.causal_shift for one sequence; a batched decode block's own, BatchDecodeAttention).
__device__ __forceinline__ int WindowStart(const AttentionKernelParams& p, int window,
                                           int64_t row, int64_t shift) {
  if (window <= 0) return 0;
  const int64_t first = row / p.group + shift - window + 1;
  return static_cast<int>(min(static_cast<int64_t>(INT_MAX), max(int64_t{0}, first)));
}

// Whether a key (row `key`) is hidden by the window from a query row whose window starts at
// `window_start` (WindowStart); keys past the row's end are the caller's to mask.
__device__ __forceinline__ bool OutsideWindow(const AttentionKernelParams& p, int key,
                                              int window_start) {
  return key < window_start && key >= p.sink_rows;
}

// The key tiles a block loads: those of the sinks, then those from the tile holding the block's
// earliest window start on (keys between the two are seen by no row of the block). Without a
// window that is every tile of [begin, end). Tiles are `keys` long and aligned to `begin`.
struct KeyTiles {
  int begin;       // first key of tile 0
  int sink_tiles;  // tiles [0, sink_tiles) start at begin
  int window_key0;  // first key of tile sink_tiles
  int count;
  __device__ __forceinline__ KeyTiles(int begin_key, int end_key, int keys, int64_t sink_rows,
                                      int window_start)
      : begin(begin_key) {
    const int sink_end =
        static_cast<int>(min(static_cast<int64_t>(end_key), max(int64_t{begin_key}, sink_rows)));
    sink_tiles = (sink_end - begin_key + keys - 1) / keys;
    const int skipped = max(0, window_start - begin_key) / keys * keys;
    window_key0 = max(begin_key + sink_tiles * keys, begin_key + skipped);
    count = sink_tiles + (window_key0 < end_key ? (end_key - window_key0 + keys - 1) / keys : 0);
  }
  __device__ __forceinline__ int Key0(int tile, int keys) const {
    return tile < sink_tiles ? begin + tile * keys : window_key0 + (tile - sink_tiles) * keys;
  }
};

// The keys KV head `kv_head` may see: [0, KeyRowsOf(p, kv_head)).
__device__ __forceinline__ int64_t KeyRowsOf(const AttentionKernelParams& p, int kv_head) {
  if (p.kv_head_rows == nullptr) return p.n_kv;
  return min(p.n_kv, max(int64_t{0}, static_cast<int64_t>(p.kv_head_rows[kv_head])));
}

// Index of the o row and lse element of packed query row `row` of `kv_head` in split `split` (in
// q's layout when split is 0).
__device__ __forceinline__ int64_t OutputRow(const AttentionKernelParams& p, int64_t row,
                                             int kv_head, int split) {
  const int64_t t = row / p.group;
  const int h = kv_head * p.group + static_cast<int>(row - t * p.group);
  return (static_cast<int64_t>(split) * p.n_q + t) * p.num_q_heads + h;
}

// The keys of split `split` that a KV head seeing keys [0, key_rows) takes (KeyRowsOf, or a
// batched sequence's length) and which of them each packed query row sees: row `row` sees
// [begin, RowEnd(row)), monotone in row. The launcher keeps key counts below 2^31.
struct SplitKeys {
  int64_t split_begin;
  int begin;  // first key of the split
  int end;    // one past its last key the head sees (begin when none)
  __device__ __forceinline__ SplitKeys(const AttentionKernelParams& p, int split, int64_t key_rows)
      : split_begin(split * p.keys_per_split),
        begin(static_cast<int>(split_begin)),
        end(static_cast<int>(max(split_begin, min(key_rows, split_begin + p.keys_per_split)))) {}
  __device__ __forceinline__ int RowEnd(const AttentionKernelParams& p, int64_t row) const {
    if (!p.causal) return end;
    const int64_t last = row / p.group + p.causal_shift + 1;
    return static_cast<int>(max(split_begin, min(static_cast<int64_t>(end), last)));
  }
};

// How a launch splits its keys and where the split partials go. Splits take whole key tiles;
// with more than one split the launch writes partials into a workspace laid out (each part
// 256-byte aligned) as o_parts [num_splits, n_q, num_q_heads, head_dim] F32, lse_parts
// [num_splits, n_q, num_q_heads] F32 and, when the caller wants no LSE, lse [n_q, num_q_heads]
// F32 for the merge to write.
struct SplitLayout {
  int num_splits = 1;
  int64_t keys_per_split = 0;
  size_t o_parts_bytes = 0, lse_parts_bytes = 0, lse_bytes = 0;
  size_t WorkspaceBytes() const { return o_parts_bytes + lse_parts_bytes + lse_bytes; }
};
// The layout of `wanted` splits (clamped to [1, 1024] and to the tiles) of `tiles` key tiles of
// `keys_per_tile` keys, for n_q query rows of num_q_heads heads.
SplitLayout MakeSplitLayout(int64_t tiles, int64_t wanted, int64_t keys_per_tile, int64_t n_q,
                            int64_t num_q_heads, int64_t head_dim, bool want_lse);
// The KV heads that read most of `n_kv` keys: those without a window (`window`: [num_kv_heads]
// host memory, or null for none) and those whose sinks and window cover half the keys or more.
// Split planning counts only these: a windowed head's blocks of the splits before its window
// return at once, and the full heads' blocks must fill the GPU alone. At least 1.
inline int64_t HeavyKvHeads(const int64_t* window, int64_t sink, int64_t num_kv_heads,
                            int64_t n_kv) {
  if (window == nullptr) return num_kv_heads;
  int64_t heavy = 0;
  for (int64_t g = 0; g < num_kv_heads; ++g)
    if (window[g] <= 0 || 2 * (sink + window[g]) >= n_kv) ++heavy;
  return heavy > 0 ? heavy : 1;
}
// Whether `p` is a multiple of `alignment` bytes.
inline bool IsAligned(const void* p, size_t alignment) {
  return reinterpret_cast<uintptr_t>(p) % alignment == 0;
}

// The empty state (o = 0, lse = -inf) for packed rows [row0, last_row] of one block, written by
// its `threads` threads: what a split gives to rows that see none of its keys.
__device__ __forceinline__ void WriteEmptyRows(const AttentionKernelParams& p, int64_t row0,
                                               int64_t last_row, int kv_head, int split,
                                               int threads) {
  const int64_t count = (last_row - row0 + 1) * p.head_dim;
  for (int64_t i = threadIdx.x; i < count; i += threads) {
    const int64_t out = OutputRow(p, row0 + i / p.head_dim, kv_head, split);
    p.o[out * p.head_dim + i % p.head_dim] = 0.0f;
    if (i % p.head_dim == 0 && p.lse != nullptr) p.lse[out] = -INFINITY;
  }
}

// Shapes of the tensor-core kernel's thread block.
enum class AttentionFlashShape {
  // 4 warps x 32 query rows each (128 rows), one 64-key tile shared by all: long query runs.
  kPrefill,
  // 1 x 16 query rows, 4 warps each taking 16 keys of every 64-key tile: decode and other short
  // query runs, where the keys (not the rows) must supply the parallelism.
  kDecode,
};

// True when the tensor-core kernel has an instance for this head_dim and K/V dtype pair.
bool AttentionFlashSupports(int head_dim, DType k_dtype, DType v_dtype);
// Query rows per thread block (in packed order) and keys per tile of a shape.
int AttentionFlashRowsPerBlock(AttentionFlashShape shape);
int AttentionFlashKeysPerTile();
// Resident blocks per SM of the instance on the current device (occupancy calculator, cached).
StatusOr<int> AttentionFlashBlocksPerSm(int head_dim, DType kv_dtype, AttentionFlashShape shape);
// Launches grid (row blocks, num_kv_heads, num_splits) on `stream`.
Status LaunchAttentionFlash(const AttentionKernelParams& params, AttentionFlashShape shape,
                            cudaStream_t stream);
// Key splits that fill one wave of resident blocks of the instance for `blocks` thread blocks of
// (rows, KV head) over `tiles` key tiles: at least kMinTilesPerSplit tiles per split; decode
// fills only kDecodeBlocksPerSm of its resident slots per SM.
StatusOr<int64_t> AttentionFlashSplits(int head_dim, DType kv_dtype, AttentionFlashShape shape,
                                       int64_t blocks, int64_t tiles);

// The entries of one batched decode launch (BatchDecodeAttentionCuda): their K/V
// ([n_kv[b], num_kv_heads, head_dim] each, 16-byte aligned), key counts, query rows and row
// indices, passed in the launch's parameters (about 5.6 KiB; CUDA 12.1 and later take up to
// 32 KiB). With `lengths`
// (device memory, [kMaxEntries] from the launch's first entry) entry b has min(n_kv[b], max(0,
// lengths[b])) keys, read when the kernel runs (BatchDecodeAttentionArgs::lengths); with
// head_rows[b] (device memory, [num_kv_heads] I32) KV head g of entry b sees only its first
// head_rows[b][g] of those (BatchDecodeAttentionArgs::kv_head_rows).
struct AttentionBatchTable {
  static constexpr int kMaxEntries = 128;
  const void* k[kMaxEntries];
  const void* v[kMaxEntries];
  int64_t n_kv[kMaxEntries];
  const int32_t* head_rows[kMaxEntries];
  // Entry b's keys through an index (BatchDecodeAttentionArgs::kv_row_index): [n_kv[b],
  // num_kv_heads] I64 flat rows of k[b] / v[b] viewed as [rows * num_kv_heads, head_dim].
  const int64_t* row_index[kMaxEntries];
  int32_t q_row[kMaxEntries];  // entry b's row of params.q
  const int64_t* lengths = nullptr;
};
// The decode instance over grid (params.n_q entries, num_kv_heads, num_splits): query row
// batch.q_row[b] of params.q against batch entry b, no mask (params.causal false,
// params.kv_head_rows null), params.group <= AttentionFlashRowsPerBlock(kDecode); outputs at row b
// of params.o / lse (per split as in LaunchAttentionFlash).
Status LaunchAttentionFlashBatch(const AttentionKernelParams& params,
                                 const AttentionBatchTable& batch, cudaStream_t stream);

// FP8 prefill attention's Hopper kernel (attention_fp8_wgmma.cu), head_dim 64 or 128: params.k is
// k8 and params.v is v8t of Fp8AttentionOperands (kernels/attention/attention_fp8_operands.h),
// params.q F32 as always; keys_per_split a multiple of kAttentionFp8KeysPerTile; no windows or
// per-head key counts. Grid (row blocks of kAttentionFp8RowsPerBlock packed rows, num_kv_heads,
// num_splits).
inline constexpr int kAttentionFp8RowsPerBlock = 128;
inline constexpr int kAttentionFp8KeysPerTile = 128;
struct AttentionFp8Scales {
  const float* k_scale = nullptr;  // [num_kv_heads, k_blocks]
  const float* v_scale = nullptr;  // [num_kv_heads, head_dim]
  int64_t k_blocks = 0;
  int64_t padded_keys = 0;  // v8t's row length
};
Status LaunchAttentionFp8Wgmma(const AttentionKernelParams& params,
                               const AttentionFp8Scales& scales, cudaStream_t stream);

// True when the wgmma kernel runs here: AttentionFlashSupports' head dims and types, a device
// of compute capability 9.0 and a driver that encodes tensor maps.
bool AttentionWgmmaSupports(int head_dim, DType k_dtype, DType v_dtype);
// Query rows (packed) per thread block of the wgmma kernel; one block per SM.
int AttentionWgmmaRowsPerBlock();
// Launches grid (row blocks, num_kv_heads, num_splits) on `stream`. K and V rows must be
// 16-byte aligned (head_dim 64/128 of a 16-bit type always are when the base is).
Status LaunchAttentionWgmma(const AttentionKernelParams& params, cudaStream_t stream);

// Element i of a K or V tensor of `dtype` (F32, BF16, F16 or F8E4M3) as a float: the CUDA-core
// paths' loads (attention_generic.cu, sparse_attention.cu).
__device__ __forceinline__ float LoadKvAsFloat(const void* data, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kF8E4M3:
      return static_cast<float>(static_cast<const __nv_fp8_e4m3*>(data)[i]);
    case DType::kBF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(data)[i]);
    case DType::kF16:
      return __half2float(static_cast<const __half*>(data)[i]);
    default:
      return static_cast<const float*>(data)[i];
  }
}

// The CUDA-core path's head_dim limit.
inline constexpr int kAttentionGenericMaxHeadDim = 256;
// Any head_dim <= kAttentionGenericMaxHeadDim, any K/V float dtypes, num_splits == 1 only.
Status LaunchAttentionGeneric(const AttentionKernelParams& params, cudaStream_t stream);

}  // namespace millipede::attention_internal
