// Rotary position embedding (Hugging Face Llama convention: rotate_half, pairs (i, i + d/2)).
#pragma once

#include <cstdint>
#include <vector>

#include "common/rope_scaling.h"
#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

// The [head_dim / 2] inverse frequencies, as Hugging Face transformers computes them
// (modeling_rope_utils.py), in fp32 with the same order of operations:
//   kNone:    inv_freq[i] = 1 / theta^(2i / head_dim)
//   kLinear:  inv_freq[i] / factor
//   kDynamic: theta' = theta * ((factor * L / max_position_embeddings) - (factor - 1))
//                      ^ (head_dim / (head_dim - 2)), where L = max(seq_len,
//             max_position_embeddings); then the default formula with theta'. HF passes
//             seq_len = max(position_ids) + 1 of the current forward pass.
//   kLlama3:  wavelengths 2*pi/inv_freq longer than original_max / low_freq_factor are divided
//             by factor, shorter than original_max / high_freq_factor kept, and in between
//             interpolated smoothly.
// `seq_len` is used only by kDynamic. Errors: odd or non-positive head_dim, theta <= 0,
// factor <= 0, llama3 without original_max_position_embeddings or with
// low_freq_factor >= high_freq_factor, dynamic without max_position_embeddings.
StatusOr<std::vector<float>> RopeInvFreq(int64_t head_dim, double theta, const RopeScaling& scaling,
                                         int64_t max_position_embeddings, int64_t seq_len);

struct RopeArgs {
  // [n, num_heads, head_dim] F32, rotated in place (call once for q and once for k).
  TensorView x;
  // [n] I64: the global position of each row.
  ConstTensorView positions;
  // [head_dim / 2] F32, from RopeInvFreq.
  ConstTensorView inv_freq;
};

// Checks RopeArgs' shapes and dtypes (not the data, which may live on a device).
Status RopeCheckArgs(const RopeArgs& args);

// For every row t, head h and i < d/2, with angle = float(positions[t]) * inv_freq[i] (an fp32
// product, as HF computes it):
//   x'[i]       = x[i] * cos(angle) - x[i + d/2] * sin(angle)
//   x'[i + d/2] = x[i + d/2] * cos(angle) + x[i] * sin(angle)
Status RopeRef(const RopeArgs& args);

}  // namespace millipede
