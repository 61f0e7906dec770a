// Sparse attention on Hopper (sm_90a), on the machinery of the dense prefill kernel
// (attention_wgmma.cuh). One thread block per (item, 128 packed query rows): a producer
// warpgroup fills a ring of 128-key K/V stages, two 64-key chunks each, walking the item's
// ranges (clipped at the tile's last position) and then its visible columns; a chunk of 64 rows
// of one range comes by TMA, any other chunk (a range's partial last one, single columns, or
// nothing) is gathered row by row with cp.async, invalid rows zero-filled, so a stage never
// holds stale or unwritten data. Two consumer warpgroups of 64 rows run the dense kernel's
// ping-pong wgmma online softmax over the stages, masking only chunks with fewer than 64 keys or
// with keys after the tile's first position. The producer and the mask: sparse_attention_wgmma.cuh.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>

#include <atomic>
#include <climits>
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/attention/sparse_attention_cuda_internal.h"
#include "kernels/attention/sparse_attention_wgmma.cuh"
#include "kernels/sparse_index/sparse_index.h"

namespace millipede::sparse_attention_internal {
namespace {

// Grid: one block per (item, row block of kRows packed rows), row_blocks per item; kThreads
// threads; Tile::kSmemBytes of dynamic shared memory. k_map / v_map: tensor maps over K / V as
// [n_kv][num_kv_heads * head_dim] with 64 x 64 boxes.
template <int kHeadDim, typename T>
__global__ void __launch_bounds__(kThreads, 1)
    SparseAttentionWgmmaKernel(const SparseAttentionParams p, int row_blocks,
                               const __grid_constant__ CUtensorMap k_map,
                               const __grid_constant__ CUtensorMap v_map) {
  using Tile = SparseTile<kHeadDim>;
  constexpr int kStages = Tile::kStages;
  // Tiles in reverse order (later tiles usually see more keys: they go first), the row blocks
  // of one item side by side (they read the same K/V, from L2).
  const int rb = static_cast<int>(blockIdx.x % row_blocks);
  const int64_t rest = blockIdx.x / row_blocks;
  const int g = static_cast<int>(rest % p.num_kv_heads);
  const int64_t t = p.n_tiles - 1 - rest / p.num_kv_heads;
  const int64_t* const tile = p.tiles + 3 * t;
  const int64_t q_begin = tile[0], item_rows = (tile[1] - tile[0]) * p.group;
  const int64_t row0 = static_cast<int64_t>(rb) * kRows;
  if (row0 >= item_rows) return;
  const int64_t item = g * p.n_tiles + t;
  const ItemKeys keys{p.range_offsets[item],
                      p.range_offsets[item + 1],
                      p.column_offsets[item],
                      p.column_offsets[item + 1],
                      tile[2],
                      tile[2] + tile[1] - tile[0] - 1};

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = ai::SharedAddress(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* const smem = smem_raw + (base - raw);
  const uint32_t kv_base = base + Tile::kQBytes;
  StageChunk* const chunks = reinterpret_cast<StageChunk*>(smem + Tile::kChunksOffset);
  const uint32_t full_bar = base + Tile::kBarriersOffset, empty_bar = full_bar + 8 * kStages;
  int* const counters = reinterpret_cast<int*>(smem + Tile::kCountersOffset);

  if (threadIdx.x == 0) {
    counters[0] = counters[1] = 0;
    for (int s = 0; s < kStages; ++s) {
      ai::MbarrierInit(full_bar + 8 * s, 1 + kProducerThreads);
      ai::MbarrierInit(empty_bar + 8 * s, kConsumerThreads);
    }
    ai::MbarrierInitFence();
  }
  __syncthreads();
  // Every thread counts chunks of some ranges and the visible columns among some columns.
  {
    int range_chunks = 0, columns = 0;
    for (int64_t r = keys.range_begin + threadIdx.x; r < keys.range_end; r += kThreads) {
      const int64_t n = VisibleKeys(p.ranges + 3 * r, keys.last_pos);
      if (n > 0) range_chunks += static_cast<int>((n + kChunkKeys - 1) / kChunkKeys);
    }
    for (int64_t c = keys.column_begin + threadIdx.x; c < keys.column_end; c += kThreads)
      columns += p.columns[2 * c + 1] <= keys.last_pos;
    if (range_chunks > 0) atomicAdd(&counters[0], range_chunks);
    if (columns > 0) atomicAdd(&counters[1], columns);
  }
  __syncthreads();
  const int num_chunks = counters[0] + (counters[1] + kChunkKeys - 1) / kChunkKeys;
  const int num_tiles = (num_chunks + 1) / 2;
  auto out_row = [&](int64_t row) {
    return (q_begin + row / p.group) * p.num_q_heads + g * p.group + row % p.group;
  };
  const int64_t block_rows = Min64(kRows, item_rows - row0);
  if (num_tiles == 0) {
    for (int64_t i = threadIdx.x; i < block_rows * kHeadDim; i += kThreads) {
      const int64_t out = out_row(row0 + i / kHeadDim);
      p.o[out * kHeadDim + i % kHeadDim] = 0.0f;
      if (i % kHeadDim == 0) p.lse[out] = -INFINITY;
    }
    return;
  }

  const int wg = threadIdx.x / 128;
  if (wg == kWarpgroups) {
    ai::SetMaxRegisters<Tile::kProducerRegisters, false>();
    ProduceTiles<Tile>(p, keys, counters[1], g, num_tiles, chunks, kv_base, full_bar, empty_bar,
                       &k_map, &v_map);
    return;
  }
  ai::SetMaxRegisters<Tile::kConsumerRegisters, true>();

  const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
  const int64_t wg_row0 = row0 + wg * ai::kWgmmaWgRows;
  uint32_t qa[kHeadDim / 16][4];
  ai::WgmmaLoadQ<T, kHeadDim>(qa, smem + wg * Tile::kQWgBytes, base + wg * Tile::kQWgBytes,
                              kQBarrier + wg, [&](int r) -> const float* {
                                const int64_t row = wg_row0 + r;
                                return row < item_rows ? p.q + out_row(row) * kHeadDim : nullptr;
                              });
  // The thread's rows (16 warp + lane / 4 and 8 further) and their positions relative to the
  // tile's first; rows past the item's are never masked (their output is not written).
  const int64_t thread_row = wg_row0 + warp * 16 + lane / 4;
  int row_rel[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = thread_row + 8 * h;
    row_rel[h] = row < item_rows ? static_cast<int>(row / p.group) : INT_MAX;
  }

  float o_acc[kHeadDim / 2];
#pragma unroll
  for (int i = 0; i < kHeadDim / 2; ++i) o_acc[i] = 0.0f;
  float s[ai::kWgmmaKeys / 2];
  uint32_t pa[ai::kWgmmaKeys / 16][4];
  AttentionState state[2] = {AttentionState::Empty(), AttentionState::Empty()};

  auto stage_of = [&](int tile) { return kv_base + (tile % kStages) * Tile::kStageBytes; };
  auto issue_qk = [&](int tile) {
    ai::WgmmaIssueQk<T, kHeadDim>(s, qa, stage_of(tile), Tile::kKvBlockBytes);
  };
  auto issue_pv = [&](int tile) {
    ai::WgmmaIssuePv<T, kHeadDim>(o_acc, pa, stage_of(tile) + Tile::kKvBytes, Tile::kKvBlockBytes);
  };
  auto softmax = [&](int tile, float(&factor)[2]) {
    MaskTile(chunks + 2 * (tile % kStages), keys.first_pos, row_rel, s);
    ai::WgmmaSoftmaxTile(s, state, factor, p.scale);
  };
  auto rescale_and_pack = [&](const float(&factor)[2]) {
    ai::WgmmaRescaleAndPack<T, kHeadDim>(o_acc, pa, s, factor);
  };
  auto fence_all = [&] {
    ai::FenceRegisters(o_acc);
    ai::FenceRegisters(s);
#pragma unroll
    for (int kk = 0; kk < ai::kWgmmaKeys / 16; ++kk) ai::FenceRegisters(pa[kk]);
  };
  ai::WgmmaPingPong<kStages, kConsumerThreads>(num_tiles, wg, full_bar, empty_bar, kTurnBarrier,
                                               issue_qk, issue_pv, softmax, rescale_and_pack,
                                               fence_all);
  ai::WgmmaWriteRows<kHeadDim>(
      o_acc, state,
      [&](int h) -> int64_t {
        const int64_t row = thread_row + 8 * h;
        return row < item_rows ? out_row(row) : -1;
      },
      p.o, p.lse);
}

using KernelFn = void (*)(SparseAttentionParams, int, CUtensorMap, CUtensorMap);

struct Instance {
  KernelFn kernel;
  int smem_bytes;
  int slot;  // for the per-device "prepared" cache
};

template <int kHeadDim>
Instance InstanceOf(DType dtype, int slot) {
  return {dtype == DType::kBF16 ? &SparseAttentionWgmmaKernel<kHeadDim, __nv_bfloat16>
                                : &SparseAttentionWgmmaKernel<kHeadDim, __half>,
          SparseTile<kHeadDim>::kSmemBytes, slot + (dtype == DType::kF16 ? 1 : 0)};
}

constexpr int kMaxCachedDevices = 64;

// Raises the instance's shared-memory limit on the current device, once per device and
// instance.
Status Prepare(const Instance& instance) {
  int device = 0;
  MP_CUDA_CHECK(cudaGetDevice(&device));
  static std::atomic<bool> prepared[kMaxCachedDevices][4];
  const bool cacheable = device >= 0 && device < kMaxCachedDevices;
  if (cacheable && prepared[device][instance.slot].load(std::memory_order_acquire))
    return OkStatus();
  MP_CUDA_CHECK(cudaFuncSetAttribute(instance.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     instance.smem_bytes));
  if (cacheable) prepared[device][instance.slot].store(true, std::memory_order_release);
  return OkStatus();
}

}  // namespace

bool SparseAttentionWgmmaSupports(int head_dim, DType kv_dtype) {
  return (head_dim == 64 || head_dim == 128) &&
         (kv_dtype == DType::kBF16 || kv_dtype == DType::kF16) && ai::WgmmaDeviceSupported();
}

Status LaunchSparseAttentionWgmma(const SparseAttentionParams& params, cudaStream_t stream) {
  MP_ASSERT(params.head_dim == 64 || params.head_dim == 128);
  MP_ASSERT(params.n_kv > 0 && params.n_kv < (int64_t{1} << 31));
  const Instance instance = params.head_dim == 64 ? InstanceOf<64>(params.kv_dtype, 0)
                                                  : InstanceOf<128>(params.kv_dtype, 2);
  MP_RETURN_IF_ERROR(Prepare(instance));
  const int64_t row_values = static_cast<int64_t>(params.num_kv_heads) * params.head_dim;
  MP_ASSIGN_OR_RETURN(
      const CUtensorMap k_map,
      ai::WgmmaTensorMap(params.k, params.kv_dtype, params.n_kv, row_values, kChunkKeys));
  MP_ASSIGN_OR_RETURN(
      const CUtensorMap v_map,
      ai::WgmmaTensorMap(params.v, params.kv_dtype, params.n_kv, row_values, kChunkKeys));
  const int row_blocks = static_cast<int>((kSparseTileRows * params.group + kRows - 1) / kRows);
  const int64_t blocks = params.n_tiles * params.num_kv_heads * row_blocks;
  MP_REQUIRE(blocks < (int64_t{1} << 31), "sparse attention: ", params.n_tiles,
             " tiles is too many");
  if (blocks == 0) return OkStatus();
  instance.kernel<<<static_cast<unsigned>(blocks), kThreads, instance.smem_bytes, stream>>>(
      params, row_blocks, k_map, v_map);
  MP_CUDA_CHECK_LAUNCH();
  return OkStatus();
}

}  // namespace millipede::sparse_attention_internal
