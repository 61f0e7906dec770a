// CUDA-core attention for what the tensor-core kernel does not cover: any head_dim up to
// kAttentionGenericMaxHeadDim, F32 K/V and K/V of different dtypes. Slow and simple on purpose:
// one warp per (query row, q head) walks the visible keys one at a time and folds each into an
// AttentionState with AddScore, exactly the rule of the reference, all in fp32.
#include <math.h>

#include <algorithm>
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/attention/attention_cuda_internal.h"
#include "kernels/attention/attention_state.h"

namespace millipede::attention_internal {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kPerLane = kAttentionGenericMaxHeadDim / 32;  // channels per lane

// Lane l owns channels l, l + 32, ... of the head. Grid: ceil(n_q * num_q_heads / 4) blocks of
// 4 warps; warp w of the grid is query row w / num_q_heads, q head w % num_q_heads.
__global__ void AttentionGenericKernel(const AttentionKernelParams p) {
  const int64_t item = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (item >= p.n_q * p.num_q_heads) return;  // whole warps leave together
  const int lane = threadIdx.x % 32;
  const int64_t t = item / p.num_q_heads;
  const int h = static_cast<int>(item - t * p.num_q_heads);
  const int kv_head = h / p.group;
  const int d = p.head_dim;

  float q[kPerLane], acc[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int c = lane + 32 * i;
    q[i] = c < d ? p.q[item * d + c] : 0.0f;
    acc[i] = 0.0f;
  }
  const int64_t rows = KeyRowsOf(p, kv_head);
  const int64_t visible = p.causal ? max(int64_t{0}, min(rows, t + p.causal_shift + 1)) : rows;

  // An A-shape head skips the keys between its sinks and its window.
  const int window = WindowOf(p, kv_head);
  const int64_t gap_begin = window > 0 ? min(visible, p.sink_rows) : visible;
  const int64_t gap_end =
      window > 0 ? max(gap_begin, min(visible, t + p.causal_shift - window + 1)) : visible;

  AttentionState state = AttentionState::Empty();
  for (int64_t j = 0; j < visible; ++j) {
    if (j == gap_begin) {
      j = gap_end;
      if (j >= visible) break;
    }
    const int64_t row = (j * p.num_kv_heads + kv_head) * d;
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int c = lane + 32 * i;
      if (c < d) dot += q[i] * LoadKvAsFloat(p.k, p.k_dtype, row + c);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    const AttentionState::Factors f = state.AddScore(dot * p.scale);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int c = lane + 32 * i;
      if (c < d) acc[i] = f.Apply(acc[i], LoadKvAsFloat(p.v, p.v_dtype, row + c));
    }
  }

  const float o_scale = state.OutputScale();
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int c = lane + 32 * i;
    if (c < d) p.o[item * d + c] = acc[i] * o_scale;
  }
  if (lane == 0 && p.lse != nullptr) p.lse[item] = state.Lse();
}

}  // namespace

Status LaunchAttentionGeneric(const AttentionKernelParams& params, cudaStream_t stream) {
  MP_ASSERT(params.num_splits == 1 && params.head_dim <= kAttentionGenericMaxHeadDim);
  const int64_t items = params.n_q * params.num_q_heads;
  if (items == 0) return OkStatus();
  const int64_t blocks = (items + kWarpsPerBlock - 1) / kWarpsPerBlock;
  MP_REQUIRE(blocks < (int64_t{1} << 31), "attention: ", params.n_q, " queries is too many");
  AttentionGenericKernel<<<static_cast<unsigned>(blocks), 32 * kWarpsPerBlock, 0, stream>>>(params);
  MP_CUDA_CHECK_LAUNCH();
  return OkStatus();
}

}  // namespace millipede::attention_internal
