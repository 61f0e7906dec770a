// One request's next-token sampling on a backend: the logit bias and the penalties (which need
// the prompt and the tokens generated so far), the draw, and the log-probabilities, put together
// from the backend's sampling ops.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/sampling_params.h"
#include "common/status.h"
#include "worker/backend/backend.h"

namespace millipede {

class TokenSampler {
 public:
  // Checks the parameters against the vocabulary and, when the bias or a penalty is on, builds
  // the per-id tables in backend memory (bias, the prompt's ids, counts of generated ids) and a
  // scratch row for the processed logits; with `params.logprobs >= 0` the logprobs outputs.
  static StatusOr<std::unique_ptr<TokenSampler>> Create(Backend& backend,
                                                        const SamplingParams& params,
                                                        int64_t vocab_size,
                                                        std::span<const int32_t> prompt_ids);

  // Samples generated token number `step` from `logits` ([vocab] F32 in backend memory, the
  // model's raw output; not modified): bias and penalties into the scratch row, then the draw
  // keyed by (seed, step); then the log-probabilities of the raw logits if asked for.
  StatusOr<SampledToken> Sample(ConstTensorView logits, uint64_t step);

  // Records a generated token in the history the penalties read. Every rank that may sample
  // later calls it with every token, in order.
  Status Accept(int32_t token);

 private:
  TokenSampler(Backend& backend, const SamplingParams& params, int64_t vocab)
      : backend_(backend), params_(params), vocab_(vocab) {}

  Backend& backend_;
  const SamplingParams params_;
  const int64_t vocab_;
  // With the bias or a penalty on: the tables, the host mirror of the counts and the scratch.
  BackendTensor bias_, prompt_mask_, output_counts_, processed_;
  std::vector<int32_t> host_counts_;
  // With logprobs asked for: [1] token logprob, [k] top ids and logprobs.
  BackendTensor token_logprob_, top_ids_, top_logprobs_;
};

}  // namespace millipede
