// FP8 prefill attention on Hopper (sm_90a): the dense wgmma kernel's pipeline (a TMA producer
// warpgroup, two consumer warpgroups of 64 packed query rows taking turns, intra-warpgroup
// overlap of each tile's softmax with its MMAs; attention_wgmma.cuh) with both products on E4M3
// operands at twice the bf16 MMA rate:
//  - Q: each warpgroup rounds its rows to E4M3 with a scale per row (largest |q| / 448) while
//    staging them, then holds them as A fragments of head_dim / 32 k32 steps;
//  - S = Q K^T: m64n128k32 over K tiles of k8 ([128 keys][head_dim bytes], K-major, one TMA
//    box; 128-byte swizzle for head_dim 128, 64-byte for 64);
//  - softmax: each row's scale times its tile's K scale times the softmax scale turns the raw
//    sums into scores; P = 256 exp(x - m) rounded to E4M3 straight from the fp32 accumulators
//    (no shuffles: V's columns are permuted per 16 keys to meet them, Fp8VColumnKey);
//  - O += P V: m64n{head_dim}k32 over V tiles of v8t ([head_dim channels][128 keys], K-major);
//  - epilogue: O's columns times V's channel scales / 256, rows by the softmax denominator.
// AttentionFp8Ref (kernels/attention/attention_fp8.h) is the same computation on the CPU.
#include <cuda.h>
#include <cuda_fp8.h>
#include <math.h>

#include <atomic>
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/attention/attention_cuda_internal.h"
#include "kernels/attention/attention_fp8_operands.h"
#include "kernels/attention/attention_wgmma.cuh"

namespace millipede::attention_internal {
namespace {

constexpr int kWgRows = kWgmmaWgRows;
constexpr int kWarpgroups = 2;
constexpr int kRows = kWgRows * kWarpgroups;
constexpr int kKeys = kWgmmaKeys;
constexpr int kPvSteps = kKeys / 32;   // k32 steps of P V
constexpr int kConsumerThreads = 128 * kWarpgroups;
constexpr int kThreads = kConsumerThreads + 128;
constexpr int kProducerRegisters = 24;
constexpr int kConsumerRegisters = 240;
static_assert(128 * kProducerRegisters + 256 * kConsumerRegisters <=
              kThreads * (65536 / kThreads / 8 * 8));
static_assert(kRows == kAttentionFp8RowsPerBlock && kKeys == kAttentionFp8KeysPerTile);
static_assert(kKeys == kFp8AttentionKeyBlock, "a K tile is one K scale block");
constexpr int kQBarrier = 1;     // 1, 2
constexpr int kTurnBarrier = 3;  // 3, 4

// Shared memory (from a 1024-byte aligned base): Q [warpgroup][64 rows][128 bytes] (head_dim
// bytes used), the rows' scales [warpgroup][64] F32 (in a 1024-byte slot), then kStages x
// (K tile [128 keys][head_dim bytes], V tile [head_dim channels][128 bytes]), then the full and
// empty barriers.
template <int kHeadDim>
struct Fp8Tile {
  static_assert(kHeadDim == 64 || kHeadDim == 128);
  static constexpr int kSteps = kHeadDim / 32;  // k32 steps of Q K^T
  static constexpr int kStages = kHeadDim == 128 ? 4 : 6;
  static constexpr int kQWgBytes = kWgRows * 128;
  static constexpr int kQBytes = kWarpgroups * kQWgBytes;
  static constexpr int kQScaleBytes = 1024;
  static constexpr int kKTileBytes = kKeys * kHeadDim;
  static constexpr int kStageBytes = kKTileBytes + kHeadDim * 128;
  static constexpr int kSmemBytes =
      1024 + kQBytes + kQScaleBytes + kStages * kStageBytes + 2 * kStages * 8;
  static_assert(kSmemBytes <= 227 * 1024, "shared memory of one SM");
};

// A K-major tile descriptor in the 64-byte swizzle (rows of 64 bytes, 8-row atoms of 512 bytes
// whose 16-byte chunk c of row r sits at c ^ (r / 2) % 4), as TMA's CU_TENSOR_MAP_SWIZZLE_64B
// writes them; SmemDescriptor's fields otherwise.
__device__ __forceinline__ uint64_t SmemDescriptorSw64(uint32_t address) {
  uint64_t desc = (address & 0x3FFFFu) >> 4;
  desc |= static_cast<uint64_t>(1) << 16;         // leading byte offset (unused): 16 bytes
  desc |= static_cast<uint64_t>(512 >> 4) << 32;  // 8-row groups 512 bytes apart
  desc |= uint64_t{2} << 62;                      // 64-byte swizzle
  return desc;
}

struct Fp8Params {
  AttentionKernelParams p;
  AttentionFp8Scales scales;
};

// E4M3 bytes of a, b, c, d (a in the lowest byte), rounded to nearest, saturating.
__device__ __forceinline__ uint32_t PackE4m3x4(float a, float b, float c, float d) {
  uint16_t lo, hi;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(lo) : "f"(b), "f"(a));
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(hi) : "f"(d), "f"(c));
  return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
}

__device__ __forceinline__ float RowScale(float amax) {
  return amax > 0.0f ? __fdiv_rn(amax, kFp8AttentionMax) : 1.0f;
}

// Rounds the warpgroup's 64 Q rows (F32 from row_ptr(r), nullptr past the end: zeros) to E4M3
// with a scale per row into q_smem ([64 rows][128 bytes], 128-byte swizzle; q_wg its shared
// address) and the scales into scale_smem[64], then loads the A fragments of the kSteps k32
// steps (ldmatrix's b16 layout is the 8-bit fragment's, two bytes per element).
template <int kHeadDim, typename RowPtr>
__device__ __forceinline__ void LoadQ8(uint32_t (&qa)[kHeadDim / 32][4], unsigned char* q_smem,
                                       float* scale_smem, uint32_t q_wg, int named_barrier,
                                       RowPtr row_ptr) {
  constexpr int kChunks = kHeadDim / 16;  // 16-byte chunks (16 values) per row
  const int tid = threadIdx.x % 128, warp = tid / 32, lane = threadIdx.x % 32;
  static_assert(kWgRows * kChunks % 128 == 0 && (kChunks == 8 || kChunks == 4));
  for (int i = tid; i < kWgRows * kChunks; i += 128) {
    // The kChunks threads of a row are adjacent lanes.
    const int r = i / kChunks, c = i % kChunks;
    const float* src = row_ptr(r);
    float x[16];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float4 v = src != nullptr ? __ldg(reinterpret_cast<const float4*>(src + 16 * c) + e)
                                      : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      x[4 * e] = v.x, x[4 * e + 1] = v.y, x[4 * e + 2] = v.z, x[4 * e + 3] = v.w;
    }
    float amax = 0.0f;
#pragma unroll
    for (int e = 0; e < 16; ++e) amax = fmaxf(amax, fabsf(x[e]));
#pragma unroll
    for (int o = 1; o < kChunks; o *= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float scale = RowScale(amax), inv = __fdiv_rn(1.0f, scale);
    uint32_t packed[4];
#pragma unroll
    for (int e = 0; e < 4; ++e)
      packed[e] = PackE4m3x4(__fmul_rn(x[4 * e], inv), __fmul_rn(x[4 * e + 1], inv),
                             __fmul_rn(x[4 * e + 2], inv), __fmul_rn(x[4 * e + 3], inv));
    *reinterpret_cast<uint4*>(q_smem + r * 128 + ((c ^ (r % 8)) << 4)) =
        make_uint4(packed[0], packed[1], packed[2], packed[3]);
    if (c == 0) scale_smem[r] = scale;
  }
  NamedBarrierSync(named_barrier, 128);
  const int r = warp * 16 + lane % 8 + (lane / 8) % 2 * 8;
#pragma unroll
  for (int ks = 0; ks < kHeadDim / 32; ++ks) {
    const int chunk = 2 * ks + lane / 16;
    Ldmatrix4(qa[ks], q_wg + r * 128 + ((chunk ^ (r % 8)) << 4));
  }
}

// The online softmax of one masked tile of raw sums (-inf: masked) with per-row score scales
// (softmax scale x Q row scale x the tile's K scale): s becomes 256 exp(x - m), the state's sum
// takes exp(x - m) and factor[h] is what row h's O must be scaled by.
__device__ __forceinline__ void SoftmaxTile8(float (&s)[kKeys / 2], AttentionState (&state)[2],
                                             float (&factor)[2], const float (&scale)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float tile_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < kKeys / 8; ++j)
      tile_max = fmaxf(tile_max, fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
    const float m_ref = fmaxf(state[h].m, tile_max * scale[h]);
    // 2^8 = 256 folded into the exponent.
    const float bias = 8.0f - (m_ref == -INFINITY ? 0.0f : m_ref * kWgmmaLog2e);
    const float scale_log2 = scale[h] * kWgmmaLog2e;
    float sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < kKeys / 8; ++j)
#pragma unroll
      for (int e = 2 * h; e < 2 * h + 2; ++e) {
        s[4 * j + e] = FastExp2(fmaf(s[4 * j + e], scale_log2, bias));
        sum[e % 2] += s[4 * j + e];
      }
    factor[h] = WgmmaAdvanceRow(state[h], m_ref, (sum[0] + sum[1]) * (1.0f / 256.0f));
  }
}

// O *= factor, then P as E4M3 A fragments: step kk covers keys 32 kk .. 32 kk + 31, and the
// thread's bytes at k 4c .. 4c + 3 are its accumulator keys 2c, 2c + 1, 8 + 2c, 9 + 2c (row g:
// s[16 kk + 0, 1, 4, 5]; row g + 8: s[16 kk + 2, 3, 6, 7]; keys + 16: s[16 kk + 8 ..]).
template <int kHeadDim>
__device__ __forceinline__ void RescaleAndPack8(float (&o)[kHeadDim / 2],
                                                uint32_t (&pa)[kPvSteps][4],
                                                const float (&s)[kKeys / 2],
                                                const float (&factor)[2]) {
  WgmmaRescaleO<kHeadDim>(o, factor);
#pragma unroll
  for (int kk = 0; kk < kPvSteps; ++kk) {
    const float* t = s + 16 * kk;
    pa[kk][0] = PackE4m3x4(t[0], t[1], t[4], t[5]);
    pa[kk][1] = PackE4m3x4(t[2], t[3], t[6], t[7]);
    pa[kk][2] = PackE4m3x4(t[8], t[9], t[12], t[13]);
    pa[kk][3] = PackE4m3x4(t[10], t[11], t[14], t[15]);
  }
}

// Grid (row blocks, num_kv_heads, num_splits); kThreads threads; Tile::kSmemBytes of dynamic
// shared memory. k_map: k8 as [n_kv][num_kv_heads * head_dim] bytes, head_dim x 128 boxes;
// v_map: v8t as [num_kv_heads * head_dim][padded keys] bytes, 128 x head_dim boxes.
template <int kHeadDim>
__global__ void __launch_bounds__(kThreads, 1)
    AttentionFp8Kernel(const Fp8Params fp, const __grid_constant__ CUtensorMap k_map,
                       const __grid_constant__ CUtensorMap v_map) {
  using Tile = Fp8Tile<kHeadDim>;
  constexpr int kSteps = Tile::kSteps;
  const AttentionKernelParams& p = fp.p;
  constexpr int kStages = Tile::kStages;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = SharedAddress(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* const smem = smem_raw + (base - raw);
  float* const q_scales = reinterpret_cast<float*>(smem + Tile::kQBytes);
  const uint32_t kv_base = base + Tile::kQBytes + Tile::kQScaleBytes;
  const uint32_t full_bar = kv_base + kStages * Tile::kStageBytes;
  const uint32_t empty_bar = full_bar + 8 * kStages;

  const int tid = threadIdx.x % 128, wg = threadIdx.x / 128;
  const int warp = tid / 32, lane = threadIdx.x % 32;
  const int64_t row0 = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * kRows;
  const int kv_head = blockIdx.y, split = blockIdx.z;
  const int64_t rows = p.n_q * p.group;
  const int64_t block_last_row = min(row0 + kRows, rows) - 1;
  const SplitKeys keys(p, split, p.n_kv);
  const int key_end = keys.RowEnd(p, block_last_row);
  if (key_end <= keys.begin) {
    WriteEmptyRows(p, row0, block_last_row, kv_head, split, kThreads);
    return;
  }
  const int num_tiles = (key_end - keys.begin + kKeys - 1) / kKeys;
  auto key0_of = [&](int tile) { return keys.begin + tile * kKeys; };

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      MbarrierInit(full_bar + 8 * s, 1);
      MbarrierInit(empty_bar + 8 * s, kConsumerThreads);
    }
    MbarrierInitFence();
  }
  __syncthreads();

  if (wg == kWarpgroups) {
    SetMaxRegisters<kProducerRegisters, false>();
    if (threadIdx.x == kConsumerThreads) {
      for (int tile = 0; tile < num_tiles; ++tile) {
        const int stage = tile % kStages;
        if (tile >= kStages) MbarrierWait(empty_bar + 8 * stage, (tile / kStages - 1) & 1);
        const uint32_t bar = full_bar + 8 * stage;
        MbarrierArriveExpectTx(bar, Tile::kStageBytes);
        const uint32_t dst = kv_base + stage * Tile::kStageBytes;
        TmaLoad2d(dst, &k_map, kv_head * kHeadDim, key0_of(tile), bar);
        TmaLoad2d(dst + Tile::kKTileBytes, &v_map, key0_of(tile), kv_head * kHeadDim, bar);
      }
    }
    return;
  }
  SetMaxRegisters<kConsumerRegisters, true>();

  const int64_t wg_row0 = row0 + wg * kWgRows;
  uint32_t qa[kSteps][4];
  LoadQ8<kHeadDim>(qa, smem + wg * Tile::kQWgBytes, q_scales + wg * kWgRows,
                   base + wg * Tile::kQWgBytes, kQBarrier + wg, [&](int r) -> const float* {
                     const int64_t row = wg_row0 + r;
                     return row < rows ? p.q + OutputRow(p, row, kv_head, 0) * kHeadDim : nullptr;
                   });
  const int64_t thread_row = wg_row0 + warp * 16 + lane / 4;
  const int row_end[2] = {keys.RowEnd(p, thread_row), keys.RowEnd(p, thread_row + 8)};
  const float q_scale[2] = {q_scales[wg * kWgRows + warp * 16 + lane / 4] * p.scale,
                            q_scales[wg * kWgRows + warp * 16 + lane / 4 + 8] * p.scale};
  const float* const k_scale = fp.scales.k_scale + kv_head * fp.scales.k_blocks;

  float o_acc[kHeadDim / 2];
#pragma unroll
  for (int i = 0; i < kHeadDim / 2; ++i) o_acc[i] = 0.0f;
  float s[kKeys / 2];
  uint32_t pa[kPvSteps][4];
  AttentionState state[2] = {AttentionState::Empty(), AttentionState::Empty()};

  auto stage_of = [&](int tile) { return kv_base + (tile % kStages) * Tile::kStageBytes; };
  auto issue_qk = [&](int tile) {
    const uint32_t k_tile = stage_of(tile);
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks) {
      const uint64_t desc = kHeadDim == 128 ? SmemDescriptor(k_tile + ks * 32, 16, 1024)
                                            : SmemDescriptorSw64(k_tile + ks * 32);
      WgmmaE4m3::M64N128(s, qa[ks], desc, ks > 0 ? 1 : 0);
    }
    WgmmaCommit();
  };
  auto issue_pv = [&](int tile) {
    const uint32_t v_tile = stage_of(tile) + Tile::kKTileBytes;
#pragma unroll
    for (int kk = 0; kk < kPvSteps; ++kk) {
      const uint64_t desc = SmemDescriptor(v_tile + kk * 32, 16, 1024);
      if constexpr (kHeadDim == 128)
        WgmmaE4m3::M64N128(o_acc, pa[kk], desc, 1);
      else
        WgmmaE4m3::M64N64(o_acc, pa[kk], desc, 1);
    }
    WgmmaCommit();
  };
  auto softmax = [&](int tile, float(&factor)[2]) {
    const int key0 = key0_of(tile);
    if (key0 + kKeys > row_end[0]) {
#pragma unroll
      for (int j = 0; j < kKeys / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = key0 + 8 * j + 2 * (lane % 4) + (e & 1);
          if (key >= row_end[e / 2]) s[4 * j + e] = -INFINITY;
        }
    }
    const float tile_scale = __ldg(k_scale + key0 / kKeys);
    const float scale[2] = {q_scale[0] * tile_scale, q_scale[1] * tile_scale};
    SoftmaxTile8(s, state, factor, scale);
  };
  auto rescale_and_pack = [&](const float(&factor)[2]) {
    RescaleAndPack8<kHeadDim>(o_acc, pa, s, factor);
  };
  auto fence_all = [&] {
    FenceRegisters(o_acc);
    FenceRegisters(s);
#pragma unroll
    for (int kk = 0; kk < kPvSteps; ++kk) FenceRegisters(pa[kk]);
  };
  WgmmaPingPong<kStages, kConsumerThreads>(num_tiles, wg, full_bar, empty_bar, kTurnBarrier,
                                           issue_qk, issue_pv, softmax, rescale_and_pack,
                                           fence_all);
  // V's channel scales and P's factor 256 on O's columns (8 j + 2 c + e % 2).
  const float* const v_scale = fp.scales.v_scale + kv_head * kHeadDim + 2 * (lane % 4);
#pragma unroll
  for (int j = 0; j < kHeadDim / 8; ++j) {
    const float2 vs = __ldg(reinterpret_cast<const float2*>(v_scale + 8 * j));
#pragma unroll
    for (int e = 0; e < 4; ++e) o_acc[4 * j + e] *= (e % 2 == 0 ? vs.x : vs.y) * (1.0f / 256.0f);
  }
  WgmmaWriteRows<kHeadDim>(
      o_acc, state,
      [&](int h) -> int64_t {
        const int64_t row = thread_row + 8 * h;
        return row < rows ? OutputRow(p, row, kv_head, split) : -1;
      },
      p.o, p.lse);
}

}  // namespace

namespace {

template <int kHeadDim>
Status Launch(const AttentionKernelParams& params, const AttentionFp8Scales& scales,
              cudaStream_t stream) {
  using Tile = Fp8Tile<kHeadDim>;
  static std::atomic<bool> prepared[64];
  int device = 0;
  MP_CUDA_CHECK(cudaGetDevice(&device));
  if (device < 0 || device >= 64 || !prepared[device].load(std::memory_order_acquire)) {
    MP_CUDA_CHECK(cudaFuncSetAttribute(AttentionFp8Kernel<kHeadDim>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       Tile::kSmemBytes));
    if (device >= 0 && device < 64) prepared[device].store(true, std::memory_order_release);
  }
  const int64_t row_bytes = static_cast<int64_t>(params.num_kv_heads) * kHeadDim;
  MP_ASSIGN_OR_RETURN(const CUtensorMap k_map,
                      WgmmaTensorMapBytes(params.k, params.n_kv, row_bytes, kHeadDim, kKeys));
  MP_ASSIGN_OR_RETURN(const CUtensorMap v_map,
                      WgmmaTensorMapBytes(params.v, row_bytes, scales.padded_keys, 128, kHeadDim));
  const int64_t row_blocks = (params.n_q * params.group + kRows - 1) / kRows;
  MP_REQUIRE(row_blocks < (int64_t{1} << 31), "fp8 attention: ", params.n_q,
             " queries is too many");
  const dim3 grid(static_cast<unsigned>(row_blocks), static_cast<unsigned>(params.num_kv_heads),
                  static_cast<unsigned>(params.num_splits));
  AttentionFp8Kernel<kHeadDim>
      <<<grid, kThreads, Tile::kSmemBytes, stream>>>(Fp8Params{params, scales}, k_map, v_map);
  MP_CUDA_CHECK_LAUNCH();
  return OkStatus();
}

}  // namespace

Status LaunchAttentionFp8Wgmma(const AttentionKernelParams& params,
                               const AttentionFp8Scales& scales, cudaStream_t stream) {
  MP_ASSERT((params.head_dim == 64 || params.head_dim == 128) && !params.windowed &&
            params.kv_head_rows == nullptr);
  MP_ASSERT(params.keys_per_split % kKeys == 0);
  return params.head_dim == 128 ? Launch<128>(params, scales, stream)
                                : Launch<64>(params, scales, stream);
}

}  // namespace millipede::attention_internal
