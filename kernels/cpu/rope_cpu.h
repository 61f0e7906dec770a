// The CPU backend's RoPE (kernels/layer/rope.h), threaded over rows.
#pragma once

#include "common/status.h"
#include "kernels/layer/rope.h"

namespace millipede {

// RopeRef's result bit for bit (the same angles, cosines, sines and products), with its checks
// and errors.
Status RopeCpu(const RopeArgs& args);

namespace cpu {

// The cosines and sines RopeRef uses for one position: cos_t[i], sin_t[i] of
// float(position) * inv_freq[i], for i < half.
void RopeAngles(int64_t position, const float* inv_freq, int64_t half, float* cos_t, float* sin_t);
// Rotates num_heads heads of head_dim = 2 * half floats in place with one position's angles.
void RopeRotate(float* x, int64_t num_heads, int64_t half, const float* cos_t, const float* sin_t);

}  // namespace cpu
}  // namespace millipede
