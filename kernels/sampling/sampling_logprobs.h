// Log-probabilities of a sampled token and of the most likely alternatives, from one row of raw
// logits: what the OpenAI API's `logprobs` / `top_logprobs` report.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

// With lse = log(sum_i exp(logits[i])) over the finite logits (natural log, computed in double
// relative to the largest logit):
//   token_logprob[0] = logits[token] - lse
//   top_ids / top_logprobs: the k largest logits, best first, ties to the lower id (the order of
//   kernels/selection/top_k.h), as ids and logit - lse; a vocabulary smaller than k fills the
//   tail with id -1 and -inf.
// -inf logits have log-probability -inf. The logits must hold no NaN or +inf and at least one
// finite value (the sampler has refused anything else by then); k = 0 writes no top entries.
struct SamplingLogprobsArgs {
  ConstTensorView logits;    // [vocab] F32
  int32_t token = 0;         // in [0, vocab)
  TensorView token_logprob;  // [1] F32
  TensorView top_ids;        // [k] I32
  TensorView top_logprobs;   // [k] F32
};

// Checks shapes, dtypes and the token's range (not the logits' values, which may live on a
// device).
Status SamplingLogprobsCheckArgs(const SamplingLogprobsArgs& args);

// The reference. Refuses NaN or +inf logits and rows without a finite value.
Status SamplingLogprobsRef(const SamplingLogprobsArgs& args);

}  // namespace millipede
