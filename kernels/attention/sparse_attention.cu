// SparseAttentionCuda: argument checks, the choice between the Hopper kernel
// (sparse_attention_wgmma.cu) and the CUDA-core kernel here. The CUDA-core kernel is slow and
// simple on purpose: one warp per (query row, q head) walks its item's visible keys one at a
// time (ranges, then columns) and folds each into an AttentionState with AddScore, the rule of
// the reference, all in fp32.
#include <cuda_runtime.h>
#include <math.h>

#include <cmath>
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/attention/attention_cuda_internal.h"
#include "kernels/attention/attention_state.h"
#include "kernels/attention/sparse_attention_cuda.h"
#include "kernels/attention/sparse_attention_cuda_internal.h"

namespace millipede {
namespace {

using sparse_attention_internal::SparseAttentionParams;

constexpr int kWarpsPerBlock = 4;
constexpr int kMaxHeadDim = attention_internal::kAttentionGenericMaxHeadDim;
constexpr int kPerLane = kMaxHeadDim / 32;  // channels per lane

bool IsAligned(const void* p, size_t alignment) {
  return reinterpret_cast<uintptr_t>(p) % alignment == 0;
}

// Lane l owns channels l, l + 32, ... of the head. Warp w of the grid is tile w / (64 *
// num_q_heads), then row (w / num_q_heads) % 64 of the tile and q head w % num_q_heads.
__global__ void SparseAttentionGenericKernel(const SparseAttentionParams p) {
  const int64_t w = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int64_t per_tile = kSparseTileRows * p.num_q_heads;
  const int64_t t = w / per_tile;
  if (t >= p.n_tiles) return;  // whole warps leave together
  const int64_t r = (w - t * per_tile) / p.num_q_heads;
  const int h = static_cast<int>(w % p.num_q_heads);
  const int64_t* const tile = p.tiles + 3 * t;
  if (r >= tile[1] - tile[0]) return;
  const int64_t row = tile[0] + r, pos = tile[2] + r;
  const int g = h / p.group, d = p.head_dim, lane = threadIdx.x % 32;
  const int64_t item = g * p.n_tiles + t;
  const int64_t out = row * p.num_q_heads + h;

  float q[kPerLane], acc[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int c = lane + 32 * i;
    q[i] = c < d ? p.q[out * d + c] : 0.0f;
    acc[i] = 0.0f;
  }
  AttentionState state = AttentionState::Empty();
  // Key rows outside k are skipped, never read.
  auto add_key = [&](int64_t key_row) {
    if (key_row < 0 || key_row >= p.n_kv) return;
    const int64_t base = (key_row * p.num_kv_heads + g) * d;
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int c = lane + 32 * i;
      if (c < d) dot += q[i] * attention_internal::LoadKvAsFloat(p.k, p.kv_dtype, base + c);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    const AttentionState::Factors f = state.AddScore(dot * p.scale);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int c = lane + 32 * i;
      if (c < d)
        acc[i] = f.Apply(acc[i], attention_internal::LoadKvAsFloat(p.v, p.kv_dtype, base + c));
    }
  };
  for (int64_t i = p.range_offsets[item]; i < p.range_offsets[item + 1]; ++i) {
    const int64_t* const range = p.ranges + 3 * i;
    const int64_t n = min(range[1] - range[0], pos - range[2] + 1);
    for (int64_t j = 0; j < n; ++j) add_key(range[0] + j);
  }
  for (int64_t i = p.column_offsets[item]; i < p.column_offsets[item + 1]; ++i)
    if (p.columns[2 * i + 1] <= pos) add_key(p.columns[2 * i]);

  const float o_scale = state.OutputScale();
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int c = lane + 32 * i;
    if (c < d) p.o[out * d + c] = acc[i] * o_scale;
  }
  if (lane == 0) p.lse[out] = state.Lse();
}

Status LaunchGeneric(const SparseAttentionParams& p, cudaStream_t stream) {
  const int64_t warps = p.n_tiles * kSparseTileRows * p.num_q_heads;
  if (warps == 0) return OkStatus();
  const int64_t blocks = (warps + kWarpsPerBlock - 1) / kWarpsPerBlock;
  MP_REQUIRE(blocks < (int64_t{1} << 31), "sparse attention: ", p.n_tiles, " tiles is too many");
  SparseAttentionGenericKernel<<<static_cast<unsigned>(blocks), 32 * kWarpsPerBlock, 0, stream>>>(
      p);
  MP_CUDA_CHECK_LAUNCH();
  return OkStatus();
}

SparseAttentionParams ParamsOf(const SparseAttentionArgs& args) {
  SparseAttentionParams p;
  p.q = args.q.as<const float>();
  p.k = args.k.data;
  p.v = args.v.data;
  p.o = args.o.as<float>();
  p.lse = args.lse.as<float>();
  p.tiles = args.tiles.as<const int64_t>();
  p.range_offsets = args.index.range_offsets.as<const int64_t>();
  p.ranges = args.index.ranges.as<const int64_t>();
  p.column_offsets = args.index.column_offsets.as<const int64_t>();
  p.columns = args.index.columns.as<const int64_t>();
  p.n_q = args.q.dim(0);
  p.n_kv = args.k.dim(0);
  p.n_tiles = args.tiles.dim(0);
  p.num_q_heads = static_cast<int>(args.q.dim(1));
  p.num_kv_heads = static_cast<int>(args.k.dim(1));
  p.head_dim = static_cast<int>(args.q.dim(2));
  p.group = p.num_q_heads / p.num_kv_heads;
  p.scale = args.scale == 0.0f
                ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.head_dim)))
                : args.scale;
  p.kv_dtype = args.k.dtype;
  return p;
}

}  // namespace

Status SparseAttentionCuda(const SparseAttentionArgs& args, cudaStream_t stream) {
  return SparseAttentionCuda(args, SparseAttentionCudaOptions{}, stream);
}

Status SparseAttentionCuda(const SparseAttentionArgs& args,
                           const SparseAttentionCudaOptions& options, cudaStream_t stream) {
  MP_RETURN_IF_ERROR(SparseAttentionCheckArgs(args));
  const int64_t head_dim = args.q.dim(2);
  if (head_dim > kMaxHeadDim)
    return UnimplementedError(
        detail::StrCat("sparse attention: head_dim ", head_dim, " is not supported on the GPU"));
  MP_REQUIRE(args.q.dim(1) < (int64_t{1} << 31) && args.k.dim(1) < 65536,
             "sparse attention: too many heads");
  const SparseAttentionParams p = ParamsOf(args);
  // TMA boxes and cp.async need 16-byte aligned K/V, the Q staging float4 loads of q, and the
  // epilogue's float2 stores 8-byte aligned o.
  const bool wgmma = options.allow_wgmma && args.k.dim(0) > 0 &&
                     args.k.dim(0) < (int64_t{1} << 31) &&
                     sparse_attention_internal::SparseAttentionWgmmaSupports(
                         static_cast<int>(head_dim), args.k.dtype) &&
                     IsAligned(args.q.data, 16) && IsAligned(args.k.data, 16) &&
                     IsAligned(args.v.data, 16) && IsAligned(args.o.data, 8);
  if (wgmma) return sparse_attention_internal::LaunchSparseAttentionWgmma(p, stream);
  return LaunchGeneric(p, stream);
}

}  // namespace millipede
