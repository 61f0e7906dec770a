// Device code shared by the RoPE kernels (rope.cu, rope_kv.cu), so that every kernel rotating
// with the same position and frequencies gives the same bits. Include only from .cu files.
#pragma once

#include <cstdint>

namespace millipede::rope_cuda {

// The block's threads fill cos_t[i], sin_t[i] (i < half) for one position: the fp32 angle
// float(position) * inv_freq[i] and the precise sincosf of it. Callers __syncthreads() after.
__device__ __forceinline__ void FillTable(int64_t position, const float* __restrict__ inv_freq,
                                          int64_t half, float* cos_t, float* sin_t) {
  const float p = static_cast<float>(position);
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x)
    sincosf(p * inv_freq[i], &sin_t[i], &cos_t[i]);
}

// Rotates pair i of one head (head[i], head[i + half]) by the table's angle i into (*y1, *y2);
// both inputs are read before either output is written, so the outputs may be the inputs.
__device__ __forceinline__ void RotatePair(const float* head, int64_t i, int64_t half,
                                           const float* cos_t, const float* sin_t, float* y1,
                                           float* y2) {
  const float x1 = head[i];
  const float x2 = head[i + half];
  *y1 = x1 * cos_t[i] - x2 * sin_t[i];
  *y2 = x2 * cos_t[i] + x1 * sin_t[i];
}

}  // namespace millipede::rope_cuda
