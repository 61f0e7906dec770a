// Next-token sampling parameters and their range check. They travel from every front end through
// the job API and the control plane to the sampling kernels, so they live here rather than in
// kernels/: the coordinator checks them without compiling any kernel.
#pragma once

#include <cstdint>

#include "common/status.h"

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

}  // namespace millipede
