// Next-token sampling parameters and their range check. They travel from every front end through
// the job API and the control plane to the sampling kernels, so they live here rather than in
// kernels/: the coordinator checks them without compiling any kernel.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/flags.h"
#include "common/status.h"

namespace millipede {

// One entry of a logit bias: `bias` is added to token `id`'s logit before anything else.
struct LogitBias {
  int32_t id = 0;
  float bias = 0.0f;
};

// Bounds shared by every front end.
inline constexpr size_t kMaxLogitBiasEntries = 1024;
inline constexpr float kMaxLogitBias = 100.0f;  // |bias| at most this (OpenAI's range)
inline constexpr int32_t kMaxTopLogprobs = 20;

// What happens to a row of logits, in this order (vLLM's, with Hugging Face's order of the
// warpers): logit_bias is added; the repetition penalty divides a positive logit (multiplies a
// negative one) of every id seen in the prompt or generated so far; the frequency and presence
// penalties subtract frequency_penalty x count + presence_penalty x (count > 0), counting only
// generated tokens; then temperature, top-k, top-p and min-p select the tokens the draw may pick.
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
  // > 0; 1 = off. Applies to every id of the prompt and of the generated tokens.
  float repetition_penalty = 1.0f;
  // In [-2, 2]; 0 = off. Generated tokens only.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // In [0, 1]; 0 = off. After top-p, tokens less likely than min_p x the most likely one go.
  float min_p = 0.0f;
  // At most kMaxLogitBiasEntries distinct ids, biases finite with |bias| <= kMaxLogitBias.
  std::vector<LogitBias> logit_bias = {};
  // -1: no log-probabilities. 0..kMaxTopLogprobs: the sampled token's log-probability and this
  // many most likely alternatives, from the model's raw logits (before bias, penalties and
  // temperature, as vLLM reports them by default). They never change the sampled token.
  int32_t logprobs = -1;

  // Whether the bias or a penalty changes the logits (and so needs the token history).
  bool ProcessesLogits() const {
    return !logit_bias.empty() || repetition_penalty != 1.0f || presence_penalty != 0.0f ||
           frequency_penalty != 0.0f;
  }
};

// One alternative of a sampled token: an id and its log-probability (natural log).
struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;
};

// A sampled token and, when the request asked for them, its log-probabilities.
struct SampledToken {
  int32_t id = 0;
  float logprob = 0.0f;                // log softmax of the raw logits at `id`
  std::vector<TokenLogprob> top = {};  // SamplingParams::logprobs entries, most likely first
};

// InvalidArgument naming the field if a parameter is out of range (NaN included). With
// vocab_size > 0 the logit bias ids must also lie in [0, vocab_size).
Status CheckSamplingParams(const SamplingParams& params, int64_t vocab_size = 0);

// The command-line tools' sampling flags (millipede-run, the `millipede` client): their names,
// their usage text, and the parameters they give (checked; defaults where absent).
extern const char kSamplingFlagsUsage[];
std::vector<std::string> SamplingFlagNames();
StatusOr<SamplingParams> SamplingParamsFromFlags(const Flags& flags);

}  // namespace millipede
