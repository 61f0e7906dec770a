// Next-token sampling from one row of logits: greedy, or temperature / top-k / top-p / min-p
// sampling with a counter-based random draw, so a (seed, step) pair gives the same token on every
// backend.
// SamplingParams and CheckSamplingParams live in common/sampling_params.h.
#pragma once

#include <cstdint>
#include <vector>

#include "common/sampling_params.h"
#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

// Checks the parameters and the logits' shape and dtype (not their values, which may live on a
// device).
Status SampleCheckArgs(ConstTensorView logits, const SamplingParams& params);

// Picks a token id from `logits` ([vocab] F32; -inf allowed, NaN and +inf are errors, at least
// one must be finite), in Hugging Face's order: temperature, then top-k, then top-p on the
// renormalised probabilities, then min-p (tokens whose probability is below min_p x the best
// one's go), then one draw u = RandomUniform(seed, step) (kernels/random.h) by inverse CDF over
// the kept tokens sorted by descending probability (ties: lower id first). Greedy ignores top_k,
// top_p, min_p, seed and step. The logit bias and the penalties are not applied here: they are
// SamplingPenalties (kernels/sampling/sampling_penalties.h), run on the logits before; the logprobs
// request is SamplingLogprobs' (kernels/sampling/sampling_logprobs.h).
StatusOr<int32_t> SampleRef(ConstTensorView logits, const SamplingParams& params, uint64_t step);

// A token the draw may pick, with a weight proportional to its probability (the best token's is
// 1).
struct SampleCandidate {
  int32_t id = 0;
  double weight = 0.0;
};

// The distribution SampleRef draws from: the kept tokens in the order the inverse CDF walks them
// (descending probability, ties to the lower id); greedy: the argmax alone. SampleRef's errors.
StatusOr<std::vector<SampleCandidate>> SampleCandidatesRef(ConstTensorView logits,
                                                           const SamplingParams& params);

}  // namespace millipede
