// Next-token sampling from one row of logits: greedy, or temperature / top-k / top-p sampling
// with a counter-based random draw, so a (seed, step) pair gives the same token on every backend.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

struct SamplingParams {
  // 0 = greedy (argmax, ties to the lowest id); otherwise logits are divided by it. Must be >= 0.
  float temperature = 0.0f;
  // Keep only the top_k most likely tokens (exactly k; ties at the boundary go to the lower
  // id). 0 = off. Must be >= 0.
  int32_t top_k = 0;
  // Keep the smallest set of most likely tokens whose probability sums to >= top_p (always at
  // least one). 1 = off. Must lie in (0, 1].
  float top_p = 1.0f;
  // Key of the random stream; step (the index of the generated token) is the counter.
  uint64_t seed = 0;
};

// InvalidArgument naming the field if a parameter is out of range (NaN included).
Status CheckSamplingParams(const SamplingParams& params);

// Checks the parameters and the logits' shape and dtype (not their values, which may live on a
// device).
Status SampleCheckArgs(ConstTensorView logits, const SamplingParams& params);

// Picks a token id from `logits` ([vocab] F32; -inf allowed, NaN and +inf are errors, at least
// one must be finite), in Hugging Face's order: temperature, then top-k, then top-p on the
// renormalised probabilities, then one draw u = RandomUniform(seed, step) (kernels/random.h)
// by inverse CDF over the kept tokens sorted by descending probability (ties: lower id first).
// Greedy ignores top_k, top_p, seed and step.
StatusOr<int32_t> SampleRef(ConstTensorView logits, const SamplingParams& params, uint64_t step);

}  // namespace millipede
