// Admission control: turns a front end's JobRequest into the prompt ids the workers run, or the
// clear error the client gets. Nothing is queued for a request that fails here.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "api/job_service.h"
#include "common/shard_plan.h"
#include "common/status.h"
#include "policy/attention_policy.h"
#include "tokenizer/tokenizer.h"

namespace millipede {

struct AdmissionLimits {
  int64_t vocab_size = 0;
  // Prompt + generated tokens (the engine's max_context).
  int64_t context_limit = 0;
  // Positions one job may take on one worker rank, and the number of ranks.
  int64_t kv_capacity_per_rank = 0;
  int num_workers = 1;
  // Largest prompt accepted, as text bytes or as ids (a front end's message limit is larger).
  int64_t max_prompt_bytes = 32 << 20;
  // The model's shape and what every worker runs (as they reported it), for a job's attention
  // policy.
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;
  PolicyCapabilities capabilities;
  // The most tokens one step adds to a job (the step scheduler's max_step_tokens): the workers
  // size a job's streaming stores by it. 0: a job's whole reservation.
  int64_t max_step_tokens = 0;
  // The workers' own policy (for jobs that bring none), and whether they may keep OmniKV's
  // selected layers in their host tier.
  std::optional<AttentionPolicy> default_policy;
  bool selected_kv_host = false;
};

// A request admitted: what the workers are sent.
struct AdmittedJob {
  std::vector<int32_t> prompt_ids;
  // The request's, or what the limits leave within its cap (JobRequest::max_new_tokens_to_limit).
  int64_t max_new_tokens = 0;
  // The request's attention policy, parsed and checked once here; none: the workers' own.
  std::optional<AttentionPolicy> policy;
  // What its KV takes on the busiest rank, in positions of dense KV (KvCostPerRank): what the
  // limits hold it to and the step scheduler counts.
  int64_t kv_cost_per_rank = 0;
};

// KV positions the busiest rank holds for a job: KvPositionsPerRank of common/shard_plan.h.

// What `positions` KV positions on a rank take under `policy` (none: dense), in positions of
// dense KV rounded up: its stores' rows (policy/head_groups.h, KvHeadRows; a DuoAttention
// policy's streaming heads keep only their sinks and window once the job is long enough) over a
// dense position's rows, for steps of up to `max_step_tokens` (0: the whole job).
int64_t KvCostPerRank(const std::optional<AttentionPolicy>& policy, int64_t positions,
                      int64_t max_step_tokens, int64_t num_layers, int64_t num_kv_heads);

// The largest prompt + max_new_tokens that admission accepts for a job with dense KV however
// the total is split between prompt and output: the context limit, or less when the workers' KV
// budget holds less (the worst split leaves num_workers x (kv_capacity_per_rank - 2) + 2); 0 when
// no job fits. What the front ends report as the model's max_model_len.
int64_t MaxModelLen(const AdmissionLimits& limits);

// The job's prompt ids and policy, after checking everything the workers would refuse and more:
// InvalidArgument for malformed input (empty or non-UTF-8 prompt, text over max_prompt_bytes
// (the message counts bytes and characters), both or neither of text and ids, ids outside the
// vocabulary, max_new_tokens < 1, bad sampling values or logit bias ids, bad stop lists,
// a malformed attention policy or one for another model shape), OutOfRange when the prompt and
// its tokens exceed the context limit or the workers' KV capacity (the job's KvCostPerRank
// against kv_capacity_per_rank; the message names the numbers; a job whose OmniKV policy fits
// only with selected layers in the workers' host tier costs the whole capacity: it runs alone,
// the workers sending as few layers there as fit), Unimplemented for a policy
// that uses a pattern or role the workers did not report (CheckPolicyRunnable against
// limits.capabilities).
StatusOr<AdmittedJob> AdmitRequest(const JobRequest& request, const Tokenizer& tokenizer,
                                   const AdmissionLimits& limits);

}  // namespace millipede
