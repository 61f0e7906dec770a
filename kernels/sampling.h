// Next-token sampling from one row of logits: greedy, or temperature / top-k / top-p sampling
// with a counter-based random draw, so a (seed, step) pair gives the same token on every backend.
// SamplingParams and CheckSamplingParams live in common/sampling_params.h.
#pragma once

#include <cstdint>

#include "common/sampling_params.h"
#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

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
