#include <algorithm>

#include "common/cuda_check.h"
#include "kernels/attention/attention_state.h"
#include "kernels/attention/merge_state_cuda.h"

namespace millipede {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

// Parts whose lse and o a thread loads before merging them, so that the loads overlap.
constexpr int kPartsAhead = 8;

// One thread per output element (row r, channel c), grid-strided. Each thread replays its row's
// merge over the parts: the scalar exp/log work is repeated across a row's threads, which is
// cheap next to the memory traffic and keeps the kernel line-for-line the reference's loop. The
// loads of kPartsAhead parts are issued together before they are merged: a decode step's merge
// is latency-bound, and with one part's loads after another's a 13-part merge took 9.9 us under
// a profiler that empties the caches. An empty part's o row may hold anything; it is loaded but
// not used.
//   o_parts [num_parts, rows, head_dim] (parts o_stride apart), lse_parts [num_parts, rows]
//   (lse_stride apart), o [rows, head_dim], lse [rows], with rows = n * num_heads.
__global__ void MergeStateKernel(const float* __restrict__ o_parts,
                                 const float* __restrict__ lse_parts, float* __restrict__ o,
                                 float* __restrict__ lse, int64_t num_parts, int64_t rows,
                                 int64_t head_dim, int64_t o_stride, int64_t lse_stride) {
  const int64_t total = rows * head_dim;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const int64_t r = i / head_dim;
    const int64_t c = i - r * head_dim;
    AttentionState state = AttentionState::Empty();
    float acc = 0.0f;
    for (int64_t p0 = 0; p0 < num_parts; p0 += kPartsAhead) {
      float part_lse[kPartsAhead], part_o[kPartsAhead];
#pragma unroll
      for (int j = 0; j < kPartsAhead; ++j) {
        const int64_t p = p0 + j;
        if (p < num_parts) {
          part_lse[j] = lse_parts[p * lse_stride + r];
          part_o[j] = o_parts[p * o_stride + r * head_dim + c];
        }
      }
#pragma unroll
      for (int j = 0; j < kPartsAhead; ++j) {
        if (p0 + j >= num_parts) break;
        const AttentionState::Factors f = state.Merge(AttentionState::FromLse(part_lse[j]));
        // A zero factor means the part's row is not needed: its value is never used.
        acc = f.Apply(acc, f.other != 0.0f ? part_o[j] : 0.0f);
      }
    }
    o[i] = acc * state.OutputScale();
    if (c == 0) lse[r] = state.Lse();
  }
}

// One warp per row (token, head): every lane derives the merged state from the two LSEs before
// lane 0 overwrites the row's lse, so the in-place update has no race.
//   o, o_other [rows, head_dim], lse, lse_other [rows].
__global__ void MergeStateInPlaceKernel(float* __restrict__ o, float* __restrict__ lse,
                                        const float* __restrict__ o_other,
                                        const float* __restrict__ lse_other, int64_t rows,
                                        int64_t head_dim) {
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  const int lane = threadIdx.x % 32;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
       r < rows; r += warps) {
    AttentionState state = AttentionState::FromLse(lse[r]);
    const AttentionState::Factors f = state.Merge(AttentionState::FromLse(lse_other[r]));
    const float scale = state.OutputScale();
    for (int64_t c = lane; c < head_dim; c += 32) {
      const float mine = f.self != 0.0f ? o[r * head_dim + c] : 0.0f;
      const float theirs = f.other != 0.0f ? o_other[r * head_dim + c] : 0.0f;
      o[r * head_dim + c] = f.Apply(mine, theirs) * scale;
    }
    __syncwarp();
    if (lane == 0) lse[r] = state.Lse();
  }
}

__global__ void FillKernel(float* __restrict__ out, int64_t n, float value) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    out[i] = value;
}

}  // namespace

Status MergeStateInPlaceCuda(TensorView o, TensorView lse, ConstTensorView o_other,
                             ConstTensorView lse_other, cudaStream_t stream) {
  MP_RETURN_IF_ERROR(MergeStateInPlaceCheckArgs(o, lse, o_other, lse_other));
  const int64_t rows = lse.NumElements();
  if (rows == 0) return OkStatus();
  const int64_t head_dim = o.NumElements() / rows;
  const int64_t blocks = std::min<int64_t>((rows * 32 + kThreads - 1) / kThreads, kMaxBlocks);
  MergeStateInPlaceKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      o.as<float>(), lse.as<float>(), o_other.as<const float>(), lse_other.as<const float>(),
      rows, head_dim);
  MP_CUDA_CHECK_LAUNCH();
  return OkStatus();
}

Status ClearStateCuda(TensorView o, TensorView lse, cudaStream_t stream) {
  MP_REQUIRE(o.dtype == DType::kF32 && lse.dtype == DType::kF32, "ClearState: F32 expected");
  MP_CUDA_CHECK(cudaMemsetAsync(o.data, 0, o.NumBytes(), stream));
  const int64_t n = lse.NumElements();
  if (n == 0) return OkStatus();
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks);
  FillKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(lse.as<float>(), n,
                                                                     -INFINITY);
  MP_CUDA_CHECK_LAUNCH();
  return OkStatus();
}

Status MergeStateCuda(const MergeStateArgs& args, cudaStream_t stream) {
  MP_RETURN_IF_ERROR(MergeStateCheckArgs(args));
  const int64_t num_parts = args.o_parts.dim(0);
  const int64_t rows = args.o_parts.dim(1) * args.o_parts.dim(2);
  const int64_t head_dim = args.o_parts.dim(3);
  const int64_t total = rows * head_dim;
  if (total == 0) return OkStatus();
  const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, kMaxBlocks);
  MergeStateKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      args.o_parts.as<const float>(), args.lse_parts.as<const float>(), args.o.as<float>(),
      args.lse.as<float>(), num_parts, rows, head_dim,
      args.part_stride > 0 ? args.part_stride : rows * head_dim,
      args.part_stride > 0 ? args.part_stride : rows);
  MP_CUDA_CHECK_LAUNCH();
  return OkStatus();
}

}  // namespace millipede
