// The logits processors that run before the draw: a logit bias, the repetition penalty over the
// prompt and the generated tokens, and the frequency and presence penalties over the generated
// tokens (vLLM's definitions). The token history is given as dense per-id tables so that a device
// reads it in one pass; SamplingPenaltiesTables builds them on the host.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/sampling_params.h"
#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

// For every id i of the vocabulary, in this order and in double, rounded to F32 once:
//   x = logits[i] + bias[i]
//   if prompt_mask[i] or output_counts[i] > 0:  x = x > 0 ? x / repetition_penalty
//                                                          : x * repetition_penalty
//   x -= frequency_penalty * output_counts[i] + presence_penalty * (output_counts[i] > 0)
//   out[i] = x
// -inf stays -inf; NaN and +inf pass through (the sampler refuses them).
struct SamplingPenaltiesArgs {
  ConstTensorView logits;         // [vocab] F32
  ConstTensorView bias;           // [vocab] F32, or empty (no bias)
  ConstTensorView prompt_mask;    // [vocab] U8, 1 where the id occurs in the prompt, or empty
  ConstTensorView output_counts;  // [vocab] I32 >= 0, occurrences among generated tokens, or empty
  float repetition_penalty = 1.0f;  // > 0
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  TensorView out;  // [vocab] F32; may be `logits` itself (in place)
};

// Checks shapes, dtypes and the penalties' ranges (not the tables' values, which may live on a
// device).
Status SamplingPenaltiesCheckArgs(const SamplingPenaltiesArgs& args);

// The reference. Negative output counts are refused.
Status SamplingPenaltiesRef(const SamplingPenaltiesArgs& args);

// The host tables of one request: the bias, the prompt's ids and the generated ids' counts.
// vocab_size >= 1; ids must lie in [0, vocab_size) (InvalidArgument otherwise).
struct SamplingPenaltiesTables {
  std::vector<float> bias;             // [vocab]
  std::vector<uint8_t> prompt_mask;    // [vocab]
  std::vector<int32_t> output_counts;  // [vocab]

  static StatusOr<SamplingPenaltiesTables> Build(int64_t vocab_size,
                                                 const std::vector<LogitBias>& logit_bias,
                                                 std::span<const int32_t> prompt_ids,
                                                 std::span<const int32_t> output_ids);
};

}  // namespace millipede
