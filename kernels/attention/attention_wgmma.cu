// Tensor-core prefill attention for Hopper (sm_90a): TMA brings 128-key K/V tiles into a ring
// of shared-memory stages (128-byte swizzle, one mbarrier per stage for "full" and one for
// "empty"), and two warpgroups, each owning 64 packed query rows of one kv head, compute
// S = Q K^T with wgmma (Q from registers, K from shared memory) and O += P V with wgmma (P from
// registers, V transposed from shared memory), keeping the online softmax in fp32 through
// AttentionState. A producer warpgroup issues the TMA loads; the consumers overlap each tile's
// softmax with MMAs (their own and, taking turns, the other warpgroup's). Same contract as the
// mma.sync kernel (attention_flash.cu), including key splits and causal tile skipping.
// FP8 (E4M3) K/V: TMA brings each tile's bytes (half the traffic) into the Q tile's shared memory
// once both warpgroups hold Q in registers, and the producer warpgroup widens them, exactly, into
// the f16 stage the consumers read (fp16 MMAs): the same stages as 16-bit K/V.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <math.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "common/cuda_check.h"
#include "kernels/attention/attention_cuda_internal.h"
#include "kernels/attention/attention_wgmma.cuh"

namespace millipede::attention_internal {
namespace {

constexpr int kWgRows = kWgmmaWgRows;  // packed query rows per warpgroup (wgmma M)
constexpr int kWarpgroups = 2;         // per block
constexpr int kRows = kWgRows * kWarpgroups;
constexpr int kKeys = kWgmmaKeys;  // keys per K/V tile (wgmma N of Q K^T)
constexpr int kConsumerThreads = 128 * kWarpgroups;
constexpr int kThreads = kConsumerThreads + 128;  // + the producer warpgroup
// Registers per thread after the producer gives its share to the consumers (setmaxnreg). The
// block holds 168 per thread (65536 / kThreads rounded down to 8) and setmaxnreg.inc waits for
// registers the others gave back, so a split must stay within them: 128 x 24 + 256 x 240. The
// FP8 producer widens tiles and keeps more: 128 x 40 + 256 x 232.
constexpr int kProducerRegisters = 24;
constexpr int kConsumerRegisters = 240;
constexpr int kProducerRegisters8 = 40;
constexpr int kConsumerRegisters8 = 232;
constexpr int kBlockRegisters = kThreads * (65536 / kThreads / 8 * 8);
static_assert(128 * kProducerRegisters + 256 * kConsumerRegisters <= kBlockRegisters);
static_assert(128 * kProducerRegisters8 + 256 * kConsumerRegisters8 <= kBlockRegisters);
// Named barrier ids: per-warpgroup Q staging, the two warpgroups' MMA turns, the FP8 producer.
constexpr int kQBarrier = 1;     // 1, 2
constexpr int kTurnBarrier = 3;  // 3, 4
constexpr int kProducerBarrier = 5;

// Shared memory of one block (from a 1024-byte aligned base): the Q tile [warpgroup][column
// block][64 rows][128 bytes] (staging: each warpgroup loads its fragments into registers once),
// then kStages x (K tile, V tile) as [column block][128 keys][128
// bytes] each, then the full and empty barriers. A column block holds 64 of the head_dim
// values of a row: 128 bytes, the swizzle span.
// With kFp8, two more barriers: the staged FP8 tile pair's "full" and "Q is free" (the staging
// area is the Q tile's memory, free once both warpgroups hold Q in registers).
template <int kHeadDimT, bool kFp8 = false>
struct WgmmaTile {
  static constexpr int kHeadDim = kHeadDimT;
  static constexpr int kColumnBlocks = kHeadDim / 64;
  static constexpr int kStages = kHeadDim == 128 ? 3 : 4;
  static constexpr int kQBlockBytes = kWgRows * 128;
  static constexpr int kQWgBytes = kColumnBlocks * kQBlockBytes;
  static constexpr int kQBytes = kWarpgroups * kQWgBytes;
  static constexpr int kKvBlockBytes = kKeys * 128;
  static constexpr int kKvBytes = kColumnBlocks * kKvBlockBytes;  // one K or V tile
  static constexpr int kStageBytes = 2 * kKvBytes;
  static constexpr int kKv8Bytes = kKeys * kHeadDim;  // one FP8 K or V tile
  static constexpr int kStage8Bytes = 2 * kKv8Bytes;
  static constexpr int kSmemBytes =
      1024 + kQBytes + kStages * kStageBytes + 2 * kStages * 8 + (kFp8 ? 16 : 0);
  static_assert(kHeadDim == 64 || kHeadDim == 128, "one or two 128-byte column blocks");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory of one SM");
  static_assert(kStage8Bytes <= kQBytes, "an FP8 tile pair fits in the Q tile's memory");
};

// The FP8 producer's widening of one staged tile pair (`src`: K then V, [kKeys][kHeadDim] bytes)
// into a 16-bit stage (`dst`: K then V, [column block][kKeys][128 bytes] in the 128-byte swizzle
// TMA writes), by the 128 threads of the producer warpgroup (`ptid`).
template <int kHeadDim>
__device__ __forceinline__ void WidenStage(const unsigned char* src, unsigned char* dst, int ptid) {
  using Tile = WgmmaTile<kHeadDim, true>;
  constexpr int kChunks8 = kHeadDim / 16;  // 16-byte chunks of a staged row
#pragma unroll 2
  for (int i = ptid; i < 2 * kKeys * kChunks8; i += 128) {
    const int tensor = i / (kKeys * kChunks8), row = (i / kChunks8) % kKeys, c = i % kChunks8;
    const uint4 raw =
        *reinterpret_cast<const uint4*>(src + tensor * Tile::kKv8Bytes + row * kHeadDim + c * 16);
    uint4 lo, hi;
    WidenFp8x16ToHalf(raw, lo, hi);
    // Columns 16c .. 16c + 15: 16-byte chunks 2c % 8 and the next of column block c / 4.
    unsigned char* const out =
        dst + tensor * Tile::kKvBytes + (c / 4) * Tile::kKvBlockBytes + row * 128;
    const int chunk = (2 * c) % 8;
    *reinterpret_cast<uint4*>(out + ((chunk ^ (row & 7)) << 4)) = lo;
    *reinterpret_cast<uint4*>(out + (((chunk + 1) ^ (row & 7)) << 4)) = hi;
  }
}

// Generic-proxy writes to shared memory made visible to the async proxy (wgmma's reads).
__device__ __forceinline__ void FenceProxyAsyncShared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Grid: (row blocks, num_kv_heads, num_splits); kThreads threads; Tile::kSmemBytes of dynamic
// shared memory. k_map / v_map: 2-D tensor maps over K / V as [n_kv rows][num_kv_heads *
// head_dim] with 64 x 128 boxes and 128-byte swizzle.
//
// Warpgroups 0 and 1 consume, warpgroup 2 produces (one thread issues every TMA load).
// A consumer warpgroup issues, in one turn, S(t) = Q K(t)^T and O += P(t-1) V(t-1), then runs
// the softmax of tile t while both MMAs are in flight (intra-warpgroup overlap); the two
// warpgroups take turns through two named barriers (ping-pong), so one's softmax runs while
// the other's MMAs use the tensor cores.
// S is the K/V storage type: T itself, or __nv_fp8_e4m3 (with T = __half, k_map / v_map over
// bytes, [kKeys][kHeadDim] boxes without swizzle).
template <int kHeadDim, typename T, typename S>
__global__ void __launch_bounds__(kThreads, 1)
    AttentionWgmmaKernel(const AttentionKernelParams p, const __grid_constant__ CUtensorMap k_map,
                         const __grid_constant__ CUtensorMap v_map) {
  constexpr bool kFp8 = !std::is_same_v<S, T>;
  static_assert(!kFp8 || (std::is_same_v<S, __nv_fp8_e4m3> && std::is_same_v<T, __half>));
  using Tile = WgmmaTile<kHeadDim, kFp8>;
  constexpr int kStages = Tile::kStages;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = SharedAddress(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* const smem = smem_raw + (base - raw);
  const uint32_t kv_base = base + Tile::kQBytes;
  const uint32_t full_bar = kv_base + kStages * Tile::kStageBytes;  // [kStages] x 8 bytes
  const uint32_t empty_bar = full_bar + 8 * kStages;
  const uint32_t full8_bar = empty_bar + 8 * kStages;  // FP8: the staged pair is in
  const uint32_t q_free_bar = full8_bar + 8;           // FP8: both warpgroups hold Q

  const int tid = threadIdx.x % 128, wg = threadIdx.x / 128;
  const int warp = tid / 32, lane = threadIdx.x % 32;
  // Causal blocks of late rows see the most keys; launching them first lets the light ones
  // fill the tail of the grid.
  const int64_t row0 = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * kRows;
  const int kv_head = blockIdx.y, split = blockIdx.z;
  const int64_t rows = p.n_q * p.group;
  const int64_t block_last_row = min(row0 + kRows, rows) - 1;

  const SplitKeys keys(p, split, KeyRowsOf(p, kv_head));
  const int key_begin = keys.begin;
  auto row_key_end = [&](int64_t row) { return keys.RowEnd(p, row); };
  // Causal tile skipping: nothing after the block's last query is loaded at all.
  const int key_end = row_key_end(block_last_row);
  // A-shape heads: keys between the sinks and the block's earliest window are not loaded either.
  const int window = WindowOf(p, kv_head);
  const KeyTiles tiles(key_begin, key_end, kKeys, window > 0 ? p.sink_rows : 0,
                       WindowStart(p, window, row0, p.causal_shift));
  if (key_end <= key_begin || tiles.count == 0) {
    WriteEmptyRows(p, row0, block_last_row, kv_head, split, kThreads);
    return;
  }
  const int num_tiles = tiles.count;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      // FP8: every producer thread arrives once its part of the stage is widened.
      MbarrierInit(full_bar + 8 * s, kFp8 ? 128 : 1);
      MbarrierInit(empty_bar + 8 * s, kConsumerThreads);
    }
    if constexpr (kFp8) {
      MbarrierInit(full8_bar, 1);
      MbarrierInit(q_free_bar, kConsumerThreads);
    }
    MbarrierInitFence();
  }
  __syncthreads();

  if constexpr (kFp8) {
    if (wg == kWarpgroups) {
      // Producer: once Q is free, thread 0 brings tile t's bytes into its memory; all 128 threads
      // widen them into stage t % kStages once both warpgroups have released that stage, and
      // thread 0 brings tile t + 1 when every thread is done reading.
      SetMaxRegisters<kProducerRegisters8, false>();
      const int ptid = threadIdx.x - kConsumerThreads;
      auto issue = [&](int tile) {
        MbarrierArriveExpectTx(full8_bar, Tile::kStage8Bytes);
        const int key0 = tiles.Key0(tile, kKeys);
        TmaLoad2d(base, &k_map, kv_head * kHeadDim, key0, full8_bar);
        TmaLoad2d(base + Tile::kKv8Bytes, &v_map, kv_head * kHeadDim, key0, full8_bar);
      };
      MbarrierWait(q_free_bar, 0);
      if (ptid == 0) issue(0);
      for (int tile = 0; tile < num_tiles; ++tile) {
        const int stage = tile % kStages;
        MbarrierWait(full8_bar, tile & 1);
        if (tile >= kStages) MbarrierWait(empty_bar + 8 * stage, (tile / kStages - 1) & 1);
        WidenStage<kHeadDim>(smem, smem + Tile::kQBytes + stage * Tile::kStageBytes, ptid);
        FenceProxyAsyncShared();
        MbarrierArrive(full_bar + 8 * stage);
        NamedBarrierSync(kProducerBarrier, 128);  // the staged pair is read by every thread
        if (ptid == 0 && tile + 1 < num_tiles) issue(tile + 1);
      }
      return;
    }
    SetMaxRegisters<kConsumerRegisters8, true>();
  } else if (wg == kWarpgroups) {
    // Producer: tile t goes to stage t % kStages once both warpgroups have released the tile
    // that stage held before.
    SetMaxRegisters<kProducerRegisters, false>();
    if (threadIdx.x == kConsumerThreads) {
      for (int tile = 0; tile < num_tiles; ++tile) {
        const int stage = tile % kStages;
        if (tile >= kStages) MbarrierWait(empty_bar + 8 * stage, (tile / kStages - 1) & 1);
        const uint32_t bar = full_bar + 8 * stage;
        MbarrierArriveExpectTx(bar, Tile::kStageBytes);
        const int key0 = tiles.Key0(tile, kKeys);
        const uint32_t k_dst = kv_base + stage * Tile::kStageBytes;
#pragma unroll
        for (int b = 0; b < Tile::kColumnBlocks; ++b) {
          const int x = kv_head * kHeadDim + b * 64;
          TmaLoad2d(k_dst + b * Tile::kKvBlockBytes, &k_map, x, key0, bar);
          TmaLoad2d(k_dst + Tile::kKvBytes + b * Tile::kKvBlockBytes, &v_map, x, key0, bar);
        }
      }
    }
    return;
  } else {
    SetMaxRegisters<kConsumerRegisters, true>();
  }

  // This warpgroup's Q rows, converted from F32 to T and stored swizzled while the first
  // tiles stream in (its precision cost is documented in attention_cuda.h).
  const int64_t wg_row0 = row0 + wg * kWgRows;
  uint32_t qa[kHeadDim / 16][4];
  WgmmaLoadQ<T, kHeadDim>(qa, smem + wg * Tile::kQWgBytes, base + wg * Tile::kQWgBytes,
                          kQBarrier + wg, [&](int r) -> const float* {
                            const int64_t row = wg_row0 + r;
                            return row < rows ? p.q + OutputRow(p, row, kv_head, 0) * kHeadDim
                                              : nullptr;
                          });
  if constexpr (kFp8) {
    // Q is in registers: its memory may take the FP8 tiles (async-proxy writes after these
    // generic reads).
    FenceProxyAsyncShared();
    MbarrierArrive(q_free_bar);
  }

  // This thread holds rows r and r + 8 of the warpgroup's 64 (r = 16 warp + lane / 4).
  const int64_t thread_row = wg_row0 + warp * 16 + lane / 4;
  const int row_end[2] = {row_key_end(thread_row), row_key_end(thread_row + 8)};
  const int row_start[2] = {WindowStart(p, window, thread_row, p.causal_shift),
                            WindowStart(p, window, thread_row + 8, p.causal_shift)};

  float o_acc[kHeadDim / 2];
#pragma unroll
  for (int i = 0; i < kHeadDim / 2; ++i) o_acc[i] = 0.0f;
  float s[kKeys / 2];
  uint32_t pa[kKeys / 16][4];  // P of the previous tile: A fragments of eight 16-key steps
  AttentionState state[2] = {AttentionState::Empty(), AttentionState::Empty()};

  auto stage_of = [&](int tile) { return kv_base + (tile % kStages) * Tile::kStageBytes; };
  auto issue_qk = [&](int tile) {
    WgmmaIssueQk<T, kHeadDim>(s, qa, stage_of(tile), Tile::kKvBlockBytes);
  };
  auto issue_pv = [&](int tile) {
    WgmmaIssuePv<T, kHeadDim>(o_acc, pa, stage_of(tile) + Tile::kKvBytes, Tile::kKvBlockBytes);
  };
  // Masks S of `tile` (only tiles on the diagonal, at the end of the keys or, for A-shape heads,
  // at the start of a window) and runs the online softmax.
  auto softmax = [&](int tile, float(&factor)[2]) {
    const int key0 = tiles.Key0(tile, kKeys);
    if (key0 + kKeys > row_end[0] ||
        (window > 0 && key0 < row_start[1] && key0 + kKeys > p.sink_rows)) {
#pragma unroll
      for (int j = 0; j < kKeys / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = key0 + 8 * j + 2 * (lane % 4) + (e & 1);
          if (key >= row_end[e / 2] || OutsideWindow(p, key, row_start[e / 2]))
            s[4 * j + e] = -INFINITY;
        }
    }
    WgmmaSoftmaxTile(s, state, factor, p.scale);
  };
  auto rescale_and_pack = [&](const float(&factor)[2]) {
    WgmmaRescaleAndPack<T, kHeadDim>(o_acc, pa, s, factor);
  };
  auto fence_all = [&] {
    FenceRegisters(o_acc);
    FenceRegisters(s);
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) FenceRegisters(pa[kk]);
  };
  // Every warpgroup computes every tile of the block (keys no row of it sees are masked): MMAs
  // under a branch would be serialised by the compiler.
  WgmmaPingPong<kStages, kConsumerThreads>(num_tiles, wg, full_bar, empty_bar, kTurnBarrier,
                                           issue_qk, issue_pv, softmax, rescale_and_pack,
                                           fence_all);
  WgmmaWriteRows<kHeadDim>(
      o_acc, state,
      [&](int h) -> int64_t {
        const int64_t row = thread_row + 8 * h;
        return row < rows ? OutputRow(p, row, kv_head, split) : -1;
      },
      p.o, p.lse);
}

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                   const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                   const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                   CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// The driver's tensor-map encoder, looked up once through the runtime (no libcuda link).
StatusOr<EncodeTiledFn> TensorMapEncoder() {
  static const EncodeTiledFn fn = []() -> EncodeTiledFn {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult query = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault,
                                         &query) != cudaSuccess ||
        query != cudaDriverEntryPointSuccess)
      return nullptr;
    return reinterpret_cast<EncodeTiledFn>(ptr);
  }();
  if (fn == nullptr)
    return UnimplementedError("attention: the CUDA driver has no cuTensorMapEncodeTiled");
  return fn;
}

using WgmmaKernelFn = void (*)(AttentionKernelParams, CUtensorMap, CUtensorMap);

template <int kHeadDim>
WgmmaKernelFn KernelOfType(DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return &AttentionWgmmaKernel<kHeadDim, __half, __half>;
    case DType::kF8E4M3:
      return &AttentionWgmmaKernel<kHeadDim, __half, __nv_fp8_e4m3>;
    default:
      return &AttentionWgmmaKernel<kHeadDim, __nv_bfloat16, __nv_bfloat16>;
  }
}

struct WgmmaInstance {
  WgmmaKernelFn kernel;
  int smem_bytes;
};

WgmmaInstance InstanceFor(int head_dim, DType dtype) {
  const bool fp8 = dtype == DType::kF8E4M3;
  const int smem = head_dim == 64
                       ? (fp8 ? WgmmaTile<64, true>::kSmemBytes : WgmmaTile<64>::kSmemBytes)
                       : (fp8 ? WgmmaTile<128, true>::kSmemBytes : WgmmaTile<128>::kSmemBytes);
  return {head_dim == 64 ? KernelOfType<64>(dtype) : KernelOfType<128>(dtype), smem};
}

constexpr int kMaxCachedDevices = 64;

// Raises the instance's shared-memory limit on the current device, once per device and
// instance.
Status Prepare(const WgmmaInstance& instance, int head_dim, DType dtype) {
  int device = 0;
  MP_CUDA_CHECK(cudaGetDevice(&device));
  const int slot = (head_dim == 128 ? 3 : 0) + (dtype == DType::kF16      ? 1
                                                : dtype == DType::kF8E4M3 ? 2
                                                                          : 0);
  static std::atomic<bool> prepared[kMaxCachedDevices][6];
  const bool cacheable = device >= 0 && device < kMaxCachedDevices;
  if (cacheable && prepared[device][slot].load(std::memory_order_acquire)) return OkStatus();
  MP_CUDA_CHECK(cudaFuncSetAttribute(instance.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     instance.smem_bytes));
  if (cacheable) prepared[device][slot].store(true, std::memory_order_release);
  return OkStatus();
}

}  // namespace

bool WgmmaDeviceSupported() {
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess)
    return false;
  // The kernels are built for sm_90a, whose wgmma and TMA instructions run on 9.0 only.
  return major == 9 && minor == 0 && TensorMapEncoder().ok();
}

StatusOr<CUtensorMap> WgmmaTensorMap(const void* data, DType dtype, int64_t rows,
                                     int64_t row_values, int box_rows) {
  MP_ASSIGN_OR_RETURN(const EncodeTiledFn encode, TensorMapEncoder());
  alignas(64) CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(row_values), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(row_values) * 2};
  const cuuint32_t box[2] = {64, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUtensorMapDataType type =
      dtype == DType::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const CUresult result =
      encode(&map, type, 2, const_cast<void*>(data), dims, strides, box, element_strides,
             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS)
    return DeviceError(detail::StrCat("attention: cuTensorMapEncodeTiled failed (", result,
                                      ") for ", rows, " x ", row_values, " values"));
  return map;
}

// FP8 rows as a byte matrix [rows][row_values]: boxes of one KV head's `head_dim` bytes by
// `box_rows` rows, unswizzled (the producer widens them into the swizzled stage).
StatusOr<CUtensorMap> WgmmaTensorMap8(const void* data, int64_t rows, int64_t row_values,
                                      int head_dim, int box_rows) {
  MP_ASSIGN_OR_RETURN(const EncodeTiledFn encode, TensorMapEncoder());
  alignas(64) CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(row_values), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(row_values)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(head_dim), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult result =
      encode(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(data), dims, strides, box,
             element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS)
    return DeviceError(detail::StrCat("attention: cuTensorMapEncodeTiled failed (", result,
                                      ") for ", rows, " x ", row_values, " FP8 values"));
  return map;
}

StatusOr<CUtensorMap> WgmmaTensorMapBytes(const void* data, int64_t rows, int64_t row_bytes,
                                          int box_bytes, int box_rows) {
  MP_ASSERT(box_bytes == 128 || box_bytes == 64);
  MP_ASSIGN_OR_RETURN(const EncodeTiledFn encode, TensorMapEncoder());
  alignas(64) CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(row_bytes), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(row_bytes)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_bytes), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult result =
      encode(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(data), dims, strides, box,
             element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
             box_bytes == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS)
    return DeviceError(detail::StrCat("attention: cuTensorMapEncodeTiled failed (", result,
                                      ") for ", rows, " x ", row_bytes, " bytes"));
  return map;
}

bool AttentionWgmmaSupports(int head_dim, DType k_dtype, DType v_dtype) {
  return AttentionFlashSupports(head_dim, k_dtype, v_dtype) && WgmmaDeviceSupported();
}

int AttentionWgmmaRowsPerBlock() { return kRows; }

Status LaunchAttentionWgmma(const AttentionKernelParams& params, cudaStream_t stream) {
  MP_ASSERT(AttentionFlashSupports(params.head_dim, params.k_dtype, params.v_dtype));
  const WgmmaInstance instance = InstanceFor(params.head_dim, params.k_dtype);
  MP_RETURN_IF_ERROR(Prepare(instance, params.head_dim, params.k_dtype));
  const int64_t row_values = static_cast<int64_t>(params.num_kv_heads) * params.head_dim;
  CUtensorMap k_map, v_map;
  if (params.k_dtype == DType::kF8E4M3) {
    MP_ASSIGN_OR_RETURN(k_map,
                        WgmmaTensorMap8(params.k, params.n_kv, row_values, params.head_dim, kKeys));
    MP_ASSIGN_OR_RETURN(v_map,
                        WgmmaTensorMap8(params.v, params.n_kv, row_values, params.head_dim, kKeys));
  } else {
    MP_ASSIGN_OR_RETURN(k_map,
                        WgmmaTensorMap(params.k, params.k_dtype, params.n_kv, row_values, kKeys));
    MP_ASSIGN_OR_RETURN(v_map,
                        WgmmaTensorMap(params.v, params.v_dtype, params.n_kv, row_values, kKeys));
  }
  const int64_t row_blocks = (params.n_q * params.group + kRows - 1) / kRows;
  MP_REQUIRE(row_blocks < (int64_t{1} << 31), "attention: ", params.n_q, " queries is too many");
  const dim3 grid(static_cast<unsigned>(row_blocks), static_cast<unsigned>(params.num_kv_heads),
                  static_cast<unsigned>(params.num_splits));
  instance.kernel<<<grid, kThreads, instance.smem_bytes, stream>>>(params, k_map, v_map);
  MP_CUDA_CHECK_LAUNCH();
  return OkStatus();
}

}  // namespace millipede::attention_internal
