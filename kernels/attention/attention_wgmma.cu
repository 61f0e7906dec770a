// Tensor-core prefill attention for Hopper (sm_90a): TMA brings 128-key K/V tiles into a ring
// of shared-memory stages (128-byte swizzle, one mbarrier per stage for "full" and one for
// "empty"), and two warpgroups, each owning 64 packed query rows of one kv head, compute
// S = Q K^T with wgmma (Q from registers, K from shared memory) and O += P V with wgmma (P from
// registers, V transposed from shared memory), keeping the online softmax in fp32 through
// AttentionState. A producer warpgroup issues the TMA loads; the consumers overlap each tile's
// softmax with MMAs (their own and, taking turns, the other warpgroup's). Same contract as the
// mma.sync kernel (attention_flash.cu), including key splits and causal tile skipping.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>

#include <atomic>
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/attention/attention_cuda_internal.h"
#include "kernels/attention/attention_mma.cuh"
#include "kernels/attention/attention_state.h"
#include "kernels/attention/attention_wgmma.cuh"

namespace millipede::attention_internal {
namespace {

constexpr int kWgRows = 64;                // packed query rows per warpgroup (wgmma M)
constexpr int kWarpgroups = 2;             // per block
constexpr int kRows = kWgRows * kWarpgroups;
constexpr int kKeys = 128;                 // keys per K/V tile (wgmma N of Q K^T)
constexpr int kConsumerThreads = 128 * kWarpgroups;
constexpr int kThreads = kConsumerThreads + 128;  // + the producer warpgroup
// Registers per thread after the producer gives its share to the consumers (setmaxnreg):
// 128 x 24 + 256 x 240 <= 65536.
constexpr int kProducerRegisters = 24;
constexpr int kConsumerRegisters = 240;
// Named barrier ids: per-warpgroup Q staging, and the two warpgroups' MMA turns.
constexpr int kQBarrier = 1;     // 1, 2
constexpr int kTurnBarrier = 3;  // 3, 4
constexpr float kLog2e = 1.4426950408889634f;

// Shared memory of one block (from a 1024-byte aligned base): the Q tile [warpgroup][column
// block][64 rows][128 bytes] (staging: each warpgroup loads its fragments into registers once),
// then kStages x (K tile, V tile) as [column block][128 keys][128
// bytes] each, then the full and empty barriers. A column block holds 64 of the head_dim
// values of a row: 128 bytes, the swizzle span.
template <int kHeadDimT>
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
  static constexpr int kSmemBytes = 1024 + kQBytes + kStages * kStageBytes + 2 * kStages * 8;
  static_assert(kHeadDim == 64 || kHeadDim == 128, "one or two 128-byte column blocks");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory of one SM");
};

// P V for one 16-key step of the O accumulator of this head_dim.
template <typename T, int kHeadDim>
__device__ __forceinline__ void PvStep(float (&o)[kHeadDim / 2], const uint32_t (&a)[4],
                                       uint64_t b_desc) {
  if constexpr (kHeadDim == 128)
    Wgmma<T>::template M64N128<1>(o, a, b_desc, 1);
  else
    Wgmma<T>::template M64N64<1>(o, a, b_desc, 1);
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
template <int kHeadDim, typename T>
__global__ void __launch_bounds__(kThreads, 1)
    AttentionWgmmaKernel(const AttentionKernelParams p, const __grid_constant__ CUtensorMap k_map,
                         const __grid_constant__ CUtensorMap v_map) {
  using Tile = WgmmaTile<kHeadDim>;
  using Mma = MmaType<T>;
  constexpr int kStages = Tile::kStages;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = SharedAddress(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* const smem = smem_raw + (base - raw);
  const uint32_t kv_base = base + Tile::kQBytes;
  const uint32_t full_bar = kv_base + kStages * Tile::kStageBytes;  // [kStages] x 8 bytes
  const uint32_t empty_bar = full_bar + 8 * kStages;

  const int tid = threadIdx.x % 128, wg = threadIdx.x / 128;
  const int warp = tid / 32, lane = threadIdx.x % 32;
  // Causal blocks of late rows see the most keys; launching them first lets the light ones
  // fill the tail of the grid.
  const int64_t row0 = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * kRows;
  const int kv_head = blockIdx.y, split = blockIdx.z;
  const int64_t rows = p.n_q * p.group;
  const int64_t block_last_row = min(row0 + kRows, rows) - 1;

  const SplitKeys keys(p, split);
  const int key_begin = keys.begin;
  auto row_key_end = [&](int64_t row) { return keys.RowEnd(p, row); };
  // Causal tile skipping: nothing after the block's last query is loaded at all.
  const int key_end = row_key_end(block_last_row);
  if (key_end <= key_begin) {
    WriteEmptyRows(p, row0, block_last_row, kv_head, split, kThreads);
    return;
  }
  const int num_tiles = (key_end - key_begin + kKeys - 1) / kKeys;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      MbarrierInit(full_bar + 8 * s, 1);
      MbarrierInit(empty_bar + 8 * s, kConsumerThreads);
    }
    MbarrierInitFence();
  }
  __syncthreads();

  if (wg == kWarpgroups) {
    // Producer: tile t goes to stage t % kStages once both warpgroups have released the tile
    // that stage held before.
    SetMaxRegisters<kProducerRegisters, false>();
    if (threadIdx.x == kConsumerThreads) {
      for (int tile = 0; tile < num_tiles; ++tile) {
        const int stage = tile % kStages;
        if (tile >= kStages) MbarrierWait(empty_bar + 8 * stage, (tile / kStages - 1) & 1);
        const uint32_t bar = full_bar + 8 * stage;
        MbarrierArriveExpectTx(bar, Tile::kStageBytes);
        const int key0 = key_begin + tile * kKeys;
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
  }
  SetMaxRegisters<kConsumerRegisters, true>();

  // This warpgroup's Q rows, converted from F32 to T and stored swizzled while the first
  // tiles stream in (its precision cost is documented in attention_cuda.h).
  const int64_t wg_row0 = row0 + wg * kWgRows;
  const uint32_t q_wg = base + wg * Tile::kQWgBytes;
  constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks per row
  for (int i = tid; i < kWgRows * kChunks; i += 128) {
    const int r = i / kChunks, c = i % kChunks;
    const int64_t row = wg_row0 + r;
    const uint4 packed = row < rows
                             ? PackQChunk<T>(p.q + OutputRow(p, row, kv_head, 0) * kHeadDim + 8 * c)
                             : make_uint4(0, 0, 0, 0);
    const uint32_t offset = (q_wg - base) + (c / 8) * Tile::kQBlockBytes + r * 128 +
                            (((c % 8) ^ (r % 8)) << 4);
    *reinterpret_cast<uint4*>(smem + offset) = packed;
  }
  NamedBarrierSync(kQBarrier + wg, 128);
  // Q stays in registers as the A fragments of the head_dim / 16 steps of Q K^T, so that the
  // MMAs read only K from shared memory.
  uint32_t qa[kHeadDim / 16][4];
  {
    const int r = warp * 16 + lane % 8 + (lane / 8) % 2 * 8;
#pragma unroll
    for (int ks = 0; ks < kHeadDim / 16; ++ks) {
      const int chunk = 2 * ks + lane / 16;
      Ldmatrix4(qa[ks], q_wg + (chunk / 8) * Tile::kQBlockBytes + r * 128 +
                            (((chunk % 8) ^ (r % 8)) << 4));
    }
  }

  // This thread holds rows r and r + 8 of the warpgroup's 64 (r = 16 warp + lane / 4).
  const int64_t thread_row = wg_row0 + warp * 16 + lane / 4;
  const int row_end[2] = {row_key_end(thread_row), row_key_end(thread_row + 8)};

  float o_acc[kHeadDim / 2];
#pragma unroll
  for (int i = 0; i < kHeadDim / 2; ++i) o_acc[i] = 0.0f;
  float s[kKeys / 2];
  uint32_t pa[kKeys / 16][4];  // P of the previous tile: A fragments of eight 16-key steps
  AttentionState state[2] = {AttentionState::Empty(), AttentionState::Empty()};
  const float scale_log2 = p.scale * kLog2e;

  // S = Q K^T of a tile, raw dot products: 16 columns of head_dim per MMA, four per column
  // block.
  auto issue_qk = [&](int tile) {
    const uint32_t k_tile = kv_base + (tile % kStages) * Tile::kStageBytes;
#pragma unroll
    for (int ks = 0; ks < kHeadDim / 16; ++ks) {
      const uint32_t column = (ks % 4) * 32;  // bytes into the 128-byte row
      Wgmma<T>::template M64N128<0>(
          s, qa[ks], SmemDescriptor(k_tile + (ks / 4) * Tile::kKvBlockBytes + column, 16, 1024),
          ks > 0 ? 1 : 0);
    }
    WgmmaCommit();
  };
  // O += P V of a tile: 16 keys (two 8-row groups, 1024 bytes apart) per MMA; the column blocks
  // of V are Tile::kKvBlockBytes apart.
  auto issue_pv = [&](int tile) {
    const uint32_t v_tile = kv_base + (tile % kStages) * Tile::kStageBytes + Tile::kKvBytes;
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk)
      PvStep<T, kHeadDim>(o_acc, pa[kk],
                          SmemDescriptor(v_tile + kk * 2048, Tile::kKvBlockBytes, 1024));
    WgmmaCommit();
  };
  // Masks S of `tile`, merges its softmax statistics into the state and turns S into
  // exp(S - m) relative to the new running max; returns the factors O must be scaled by (as
  // in the mma.sync kernel, the tile's own factor is exactly 1, so P V is added unscaled).
  auto softmax = [&](int tile, float (&factor)[2]) {
    const int key0 = key_begin + tile * kKeys;
    if (key0 + kKeys > row_end[0]) {  // only tiles on the diagonal or at the end of the keys
#pragma unroll
      for (int j = 0; j < kKeys / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (key0 + 8 * j + 2 * (lane % 4) + (e & 1) >= row_end[e / 2]) s[4 * j + e] = -INFINITY;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float tile_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < kKeys / 8; ++j)
        tile_max = fmaxf(tile_max, fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
      const float m_ref = fmaxf(state[h].m, tile_max * p.scale);
      const float m_ref_log2 = m_ref == -INFINITY ? 0.0f : m_ref * kLog2e;
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < kKeys / 8; ++j)
#pragma unroll
        for (int e = 2 * h; e < 2 * h + 2; ++e) {
          s[4 * j + e] = FastExp2(fmaf(s[4 * j + e], scale_log2, -m_ref_log2));
          sum += s[4 * j + e];
        }
      factor[h] = state[h].Merge(AttentionState{m_ref, sum}).self;
    }
  };
  // O *= factor, then P = S as 16-bit A fragments (two 8-key accumulator blocks per step).
  auto rescale_and_pack = [&](const float (&factor)[2]) {
    // Once the running max settles, most tiles leave it unchanged (factor 1).
    if (factor[0] != 1.0f || factor[1] != 1.0f) {
#pragma unroll
      for (int j = 0; j < kHeadDim / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) o_acc[4 * j + e] *= factor[e / 2];
    }
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      pa[kk][0] = Mma::Pack(s[8 * kk + 0], s[8 * kk + 1]);
      pa[kk][1] = Mma::Pack(s[8 * kk + 2], s[8 * kk + 3]);
      pa[kk][2] = Mma::Pack(s[8 * kk + 4], s[8 * kk + 5]);
      pa[kk][3] = Mma::Pack(s[8 * kk + 6], s[8 * kk + 7]);
    }
  };
  auto fence_all = [&] {
    FenceRegisters(o_acc);
    FenceRegisters(s);
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) FenceRegisters(pa[kk]);
  };

  // Turns alternate between the warpgroups, warpgroup 0 first. Every warpgroup computes every
  // tile of the block (keys no row of it sees are masked): MMAs under a branch would be
  // serialised by the compiler.
  const int my_turn = kTurnBarrier + wg, their_turn = kTurnBarrier + 1 - wg;
  if (wg == 1) NamedBarrierArrive(their_turn, kConsumerThreads);

  MbarrierWait(full_bar, 0);
  NamedBarrierSync(my_turn, kConsumerThreads);
  fence_all();
  WgmmaFence();
  issue_qk(0);
  NamedBarrierArrive(their_turn, kConsumerThreads);
  WgmmaWait<0>();
  fence_all();
  {
    float factor[2];
    softmax(0, factor);
    rescale_and_pack(factor);
  }
  for (int tile = 1; tile < num_tiles; ++tile) {
    const int stage = tile % kStages;
    MbarrierWait(full_bar + 8 * stage, (tile / kStages) & 1);
    NamedBarrierSync(my_turn, kConsumerThreads);
    fence_all();
    WgmmaFence();
    issue_qk(tile);
    issue_pv(tile - 1);
    NamedBarrierArrive(their_turn, kConsumerThreads);
    WgmmaWait<1>();  // S of this tile; P V of the last may still run
    fence_all();
    float factor[2];
    softmax(tile, factor);
    WgmmaWait<0>();
    fence_all();
    MbarrierArrive(empty_bar + 8 * ((tile - 1) % kStages));
    rescale_and_pack(factor);
  }
  const int last = num_tiles - 1;
  NamedBarrierSync(my_turn, kConsumerThreads);
  fence_all();
  WgmmaFence();
  issue_pv(last);
  NamedBarrierArrive(their_turn, kConsumerThreads);
  WgmmaWait<0>();
  fence_all();
  MbarrierArrive(empty_bar + 8 * (last % kStages));
  // Warpgroup 1's last arrival, so that no barrier is left half-complete.
  if (wg == 0) NamedBarrierSync(my_turn, kConsumerThreads);

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float& d = state[h].d;
    d += __shfl_xor_sync(0xffffffffu, d, 1);
    d += __shfl_xor_sync(0xffffffffu, d, 2);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = thread_row + 8 * h;
    if (row >= rows) continue;
    const int64_t out = OutputRow(p, row, kv_head, split);
    const float o_scale = state[h].OutputScale();
    float* const o = p.o + out * kHeadDim + 2 * (lane % 4);
#pragma unroll
    for (int j = 0; j < kHeadDim / 8; ++j)
      *reinterpret_cast<float2*>(o + 8 * j) =
          make_float2(o_acc[4 * j + 2 * h] * o_scale, o_acc[4 * j + 2 * h + 1] * o_scale);
    if (lane % 4 == 0 && p.lse != nullptr) p.lse[out] = state[h].Lse();
  }
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

// [n_kv rows][num_kv_heads * head_dim] 16-bit K or V, boxes of 64 values x kKeys rows.
StatusOr<CUtensorMap> KvTensorMap(const void* data, const AttentionKernelParams& p) {
  MP_ASSIGN_OR_RETURN(const EncodeTiledFn encode, TensorMapEncoder());
  alignas(64) CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(p.num_kv_heads) * p.head_dim,
                              static_cast<cuuint64_t>(p.n_kv)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(p.num_kv_heads) * p.head_dim * 2};
  const cuuint32_t box[2] = {64, kKeys};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUtensorMapDataType type = p.k_dtype == DType::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                             : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const CUresult result =
      encode(&map, type, 2, const_cast<void*>(data), dims, strides, box, element_strides,
             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS)
    return DeviceError(detail::StrCat("attention: cuTensorMapEncodeTiled failed (", result,
                                      ") for ", p.n_kv, " x ", dims[0], " values"));
  return map;
}

using WgmmaKernelFn = void (*)(AttentionKernelParams, CUtensorMap, CUtensorMap);

template <int kHeadDim>
WgmmaKernelFn KernelOfType(DType dtype) {
  return dtype == DType::kBF16 ? &AttentionWgmmaKernel<kHeadDim, __nv_bfloat16>
                               : &AttentionWgmmaKernel<kHeadDim, __half>;
}

struct WgmmaInstance {
  WgmmaKernelFn kernel;
  int smem_bytes;
};

WgmmaInstance InstanceFor(int head_dim, DType dtype) {
  return head_dim == 64 ? WgmmaInstance{KernelOfType<64>(dtype), WgmmaTile<64>::kSmemBytes}
                        : WgmmaInstance{KernelOfType<128>(dtype), WgmmaTile<128>::kSmemBytes};
}

constexpr int kMaxCachedDevices = 64;

// Raises the instance's shared-memory limit on the current device, once per device and
// instance.
Status Prepare(const WgmmaInstance& instance, int head_dim, DType dtype) {
  int device = 0;
  MP_CUDA_CHECK(cudaGetDevice(&device));
  const int slot = (head_dim == 128 ? 2 : 0) + (dtype == DType::kF16 ? 1 : 0);
  static std::atomic<bool> prepared[kMaxCachedDevices][4];
  const bool cacheable = device >= 0 && device < kMaxCachedDevices;
  if (cacheable && prepared[device][slot].load(std::memory_order_acquire)) return OkStatus();
  MP_CUDA_CHECK(cudaFuncSetAttribute(instance.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     instance.smem_bytes));
  if (cacheable) prepared[device][slot].store(true, std::memory_order_release);
  return OkStatus();
}

}  // namespace

bool AttentionWgmmaSupports(int head_dim, DType k_dtype, DType v_dtype) {
  if (!AttentionFlashSupports(head_dim, k_dtype, v_dtype)) return false;
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess)
    return false;
  // The kernel is built for sm_90a, whose wgmma and TMA instructions run on 9.0 only.
  return major == 9 && minor == 0 && TensorMapEncoder().ok();
}

int AttentionWgmmaRowsPerBlock() { return kRows; }

Status LaunchAttentionWgmma(const AttentionKernelParams& params, cudaStream_t stream) {
  MP_ASSERT(AttentionFlashSupports(params.head_dim, params.k_dtype, params.v_dtype));
  const WgmmaInstance instance = InstanceFor(params.head_dim, params.k_dtype);
  MP_RETURN_IF_ERROR(Prepare(instance, params.head_dim, params.k_dtype));
  MP_ASSIGN_OR_RETURN(const CUtensorMap k_map, KvTensorMap(params.k, params));
  MP_ASSIGN_OR_RETURN(const CUtensorMap v_map, KvTensorMap(params.v, params));
  const int64_t row_blocks = (params.n_q * params.group + kRows - 1) / kRows;
  MP_REQUIRE(row_blocks < (int64_t{1} << 31), "attention: ", params.n_q, " queries is too many");
  const dim3 grid(static_cast<unsigned>(row_blocks), static_cast<unsigned>(params.num_kv_heads),
                  static_cast<unsigned>(params.num_splits));
  instance.kernel<<<grid, kThreads, instance.smem_bytes, stream>>>(params, k_map, v_map);
  MP_CUDA_CHECK_LAUNCH();
  return OkStatus();
}

}  // namespace millipede::attention_internal
