// Offline generation on an Engine: prefill a prompt, then decode token by token until a stop
// condition (an EOS id, a stop id, or the token budget), through the same BatchRunner the
// service's workers run.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/sampling_params.h"
#include "common/status.h"
#include "worker/engine/engine.h"

namespace millipede {

struct GenerationRequest {
  std::vector<int32_t> prompt_ids;
  int64_t max_new_tokens = 16;
  SamplingParams sampling;
  // Generation stops after emitting any of these (the stop token is included in the output).
  std::vector<int32_t> stop_ids;
  // When false, the model's EOS ids (config.json eos_token_id) also stop generation.
  bool ignore_eos = false;
  // An attention policy for this request only, already parsed (ParseAttentionPolicy; the service
  // parses a job's once, at admission); none: the engine's.
  std::optional<AttentionPolicy> policy;
};

enum class FinishReason { kStop, kLength };
const char* FinishReasonName(FinishReason reason);  // "stop" or "length" (OpenAI's names)

struct GenerationResult {
  std::vector<int32_t> ids;  // generated tokens
  FinishReason finish_reason = FinishReason::kLength;
  int64_t prompt_tokens = 0;
  double ttft_s = 0;    // request start to first generated token (prefill + first sample)
  double decode_s = 0;  // first to last generated token
  PrefillDensity prefill;  // the prefill attention's query-key pairs (engine StepOutput)
  double prefill_tokens_per_s() const { return ttft_s > 0 ? prompt_tokens / ttft_s : 0; }
  double decode_tokens_per_s() const {
    return ids.size() > 1 && decode_s > 0 ? (ids.size() - 1) / decode_s : 0;
  }
};

// Called with each generated token (and its log-probabilities when the request's
// sampling.logprobs asks for them) as soon as it is sampled; returning false cancels generation
// (Generate then returns a Cancelled status; the tokens so far were all passed to the callback).
using TokenCallback = std::function<bool(const SampledToken& token)>;

// Called during prefill after each layer with the prompt tokens done so far (all ranks together,
// counted as layers done x prompt length / layers) and the prompt length; returning false on any
// rank cancels the job on every rank (Generate returns Cancelled).
using ProgressCallback = std::function<bool(int64_t tokens_done, int64_t tokens_total)>;

// Checks a request against the engine's model before any work: a non-empty prompt of in-vocabulary
// ids, max_new_tokens >= 1, prompt + max_new_tokens within the context limit, valid sampling, a
// policy the engine runs for this model (Engine::CheckPolicy).
Status ValidateGenerationRequest(const Engine& engine, const GenerationRequest& request);

// Runs the whole request on every rank of the engine's communicator at once (each rank calls
// this with the same request), as one job of a BatchRunner (batch_runner.h) on the sequence of
// the lowest free id: a step that starts it and prefills the whole prompt (sharded by ShardPlan,
// ring attention), then a decode step per token with K/V spread over the ranks; the stop rules
// and the sampling are the runner's, as the service's workers run them. Every rank returns the
// same result. With several ranks `on_token` must answer the same on every rank, and it sees
// the same token and log-probabilities on every rank. The penalties read the prompt and every
// generated token; draws are keyed by (seed, step), so a request gives the same tokens on any
// number of ranks. The job's sequence is freed afterwards whatever happens.
StatusOr<GenerationResult> Generate(Engine& engine, const GenerationRequest& request,
                                    const TokenCallback& on_token = nullptr,
                                    const ProgressCallback& on_progress = nullptr);

}  // namespace millipede
