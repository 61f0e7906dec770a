// The coordinator's job API as the front ends (Cap'n Proto RPC, OpenAI HTTP, the canary) see it:
// submit a job with an observer for its events, query or cancel it, describe the model and the
// service's health. One implementation (the scheduler in coordinator/) runs jobs on the worker
// ranks; tests may use fakes.
//
// Threading: every method may be called from any thread. Events of one job are delivered in
// order, never concurrently, from a thread owned by the service; observers must not block (front
// ends post the event to their own event loop) and must not call back into the service from the
// event callback itself.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/sampling_params.h"
#include "common/status.h"
#include "monitoring/service_metrics.h"

namespace millipede {

using JobId = uint64_t;

// A job as a front end hands it over, after parsing its own wire format.
struct JobRequest {
  // Exactly one of the two is non-empty: text is tokenized by the coordinator (no BOS is added
  // unless add_bos; chat templates and callers add special tokens as text), ids are used as they
  // are.
  std::string prompt_text;
  std::vector<int32_t> prompt_ids;
  // Put the tokenizer's BOS (if it has one) before a text prompt's ids, as Hugging Face's
  // encode(add_special_tokens=True) does.
  bool add_bos = false;
  // At least 1; prompt + max_new_tokens must fit the context limit and the workers' KV capacity.
  int64_t max_new_tokens = 16;
  // As many tokens as the context limit and the workers' KV capacity leave after the prompt (at
  // least 1), and at most max_new_tokens when that is >= 1 (a default cap rather than a demand);
  // max_new_tokens 0: the rest of the context, as OpenAI's and vLLM's chat endpoints default to.
  bool max_new_tokens_to_limit = false;
  // Logit bias ids are checked against the vocabulary; logprobs >= 0 makes every OnToken carry
  // the token's log-probabilities.
  SamplingParams sampling;
  // Generation stops after any of these ids (the id is part of the output) ...
  std::vector<int32_t> stop_ids;
  // ... or as soon as the generated text contains one of these strings (OpenAI's `stop`: the
  // text is cut before the match and the finish reason is "stop").
  std::vector<std::string> stop_strings;
  // When false, the model's EOS ids stop generation too.
  bool ignore_eos = false;
  // Attention policy overrides in the policy-file JSON format; empty = the service's default.
  std::string policy_json;
  // The prefix cache (when the service runs one): false neither reuses a cached prefix nor
  // leaves this job's KV in the cache; pin keeps the KV this job leaves until it is unpinned or
  // dropped (JobService::PinCacheEntry, DropCacheEntry).
  bool cache = true;
  bool pin = false;
};

// One prefix-cache entry: an ended job's KV, kept on the workers for later prompts that start
// with its tokens.
struct CacheEntryInfo {
  uint64_t id = 0;           // the job whose KV it is
  int64_t tokens = 0;        // of its tokens, those a later prompt may reuse
  int64_t kv_positions = 0;  // KV positions it holds on the busiest worker rank
  bool pinned = false;
  int64_t hits = 0;     // jobs that started from it
  int64_t holders = 0;  // queued jobs about to start from it
  std::string tier;     // "device": the workers' KV memory; "host": their host memory
};

enum class JobState { kQueued, kPrefill, kDecode, kFinished, kCancelled, kFailed };
const char* JobStateName(JobState state);  // "queued", "prefill", ...

// The final record of a job that produced its answer.
struct JobCompletion {
  std::string finish_reason;  // "stop" or "length" (OpenAI's names)
  std::vector<int32_t> ids;   // generated ids
  std::string text;           // their text (cut at a matched stop string)
  int64_t prompt_tokens = 0;
  double queue_s = 0;              // submit to start of prefill
  double ttft_s = 0;               // submit to first generated token
  double e2e_s = 0;                // submit to completion
  double prefill_tokens_per_s = 0;
  double decode_tokens_per_s = 0;
  // The query-key pairs its prefill attention computed and the causal pairs of its prompt (per
  // KV head, over every layer): their ratio is the achieved density of the attention policy
  // (1 for dense attention; sparse and A-shape heads compute fewer).
  int64_t prefill_attended_pairs = 0;
  int64_t prefill_causal_pairs = 0;
  // Prompt tokens whose KV came from the prefix cache (not prefilled), and the entry this job's
  // KV became (0: none; its id is the job's).
  int64_t cached_tokens = 0;
  uint64_t cache_entry = 0;
  double PrefillDensity() const {
    return prefill_causal_pairs > 0
               ? static_cast<double>(prefill_attended_pairs) / prefill_causal_pairs
               : 1.0;
  }
};

// One job's events. Exactly one of OnComplete / OnError ends every accepted job (a cancelled job
// ends with OnError(CancelledError)).
class JobObserver {
 public:
  virtual ~JobObserver() = default;
  // Prefill progress in prompt tokens (monotonic; total = the prompt length).
  virtual void OnProgress(int64_t tokens_done, int64_t tokens_total) = 0;
  // One generated token (with its log-probabilities when the job asked for them) and the text it
  // completes (may be empty while a UTF-8 sequence or a possible stop string is still open; the
  // pieces concatenate to JobCompletion::text).
  virtual void OnToken(const SampledToken& token, std::string_view text_delta) = 0;
  virtual void OnComplete(const JobCompletion& completion) = 0;
  virtual void OnError(const Status& error) = 0;
};

struct JobStatusInfo {
  JobId id = 0;
  JobState state = JobState::kQueued;
  int64_t queue_position = 0;  // jobs ahead of it while queued, else 0
  int64_t prompt_tokens = 0;
  int64_t prefill_done = 0;    // prompt tokens prefilled so far
  int64_t generated_tokens = 0;
  std::string error;           // for kFailed
};

struct ModelInfo {
  std::string id;              // the served model's name (directory name unless configured)
  int64_t context_limit = 0;   // prompt + generated tokens
  int64_t kv_capacity_tokens = 0;  // what the workers' memory holds for one job
  // The largest prompt + generated tokens one job is admitted with: context_limit, or less when
  // the workers' KV budget (their memory plan, as reported) holds less for one job.
  int64_t max_model_len = 0;
  int64_t vocab_size = 0;
  int num_workers = 0;
  std::string chat_format;     // "llama3", "chatml" or "" (no chat template known)
};

struct HealthInfo {
  bool alive = true;           // the process and its workers are up
  bool accepting = true;       // false while draining (SIGTERM) or after a worker failure
  int64_t running = 0;
  int64_t waiting = 0;
  double seconds_since_last_token = -1;  // -1: no token produced yet
  std::string detail;          // why not alive / not accepting
};

class Tokenizer;

class JobService {
 public:
  virtual ~JobService() = default;
  // Validates (tokenizes text, checks limits, sampling, ids) and queues the job. Any error is
  // returned here with nothing queued: InvalidArgument for bad input, OutOfRange for a prompt
  // over the context limit (the message names both numbers), ResourceExhausted "queue full",
  // FailedPrecondition while draining or after a worker failure.
  virtual StatusOr<JobId> Submit(JobRequest request, std::shared_ptr<JobObserver> observer) = 0;
  // Counts a request a front end refused before it reached Submit (malformed, unsupported,
  // unauthorised, ...) under `reason`, one of ServiceMetrics::RequestError's reasons. Submit
  // counts its own refusals.
  virtual void CountRefusal(std::string_view reason) { (void)reason; }
  // Cancels a queued or running job (its KV is freed on every rank). Idempotent: for a job that
  // has already ended (finished, failed, cancelled) it does nothing and returns Ok, so a client
  // racing its own job's end does not fail; NotFound only for an id the service never issued.
  virtual Status Cancel(JobId id) = 0;
  virtual StatusOr<JobStatusInfo> GetStatus(JobId id) const = 0;
  virtual ModelInfo GetModelInfo() const = 0;
  virtual HealthInfo GetHealth() const = 0;
  virtual const Tokenizer& tokenizer() const = 0;
  // Extension: the latest stats each worker rank reported (KV bytes held now, communication
  // totals), in rank order; the RPC API serves them so that operators and tests can see a
  // cancelled job's KV freed on every rank without scraping metrics. Services without worker
  // ranks (fakes in tests) have none.
  virtual std::vector<RankStats> GetWorkerStats() const { return {}; }

  // The prefix cache (docs/operations.md, "The prefix cache"): its entries, most recently used
  // first; pinning one (kept until unpinned or dropped) or unpinning it; dropping one (its KV is
  // freed on every worker with the next step). Unimplemented where the service keeps no cache;
  // NotFound for an id that is not an entry; a drop is FailedPrecondition while a queued job is
  // about to start from the entry.
  virtual StatusOr<std::vector<CacheEntryInfo>> ListCache() const {
    return UnimplementedError("this service keeps no prefix cache");
  }
  virtual Status PinCacheEntry(uint64_t id, bool pinned) {
    return UnimplementedError("this service keeps no prefix cache");
  }
  virtual Status DropCacheEntry(uint64_t id) {
    return UnimplementedError("this service keeps no prefix cache");
  }
};

}  // namespace millipede
