#include "worker/generate.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "common/shard_plan.h"
#include "control/messages.h"
#include "worker/batch_runner.h"

namespace millipede {
namespace {

using control::StepEntryKind;
using control::StepOutcome;

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The lowest job id no sequence of the engine holds: every rank holds the same sequences, so
// every rank picks the same.
uint64_t FreeJobId(const Engine& engine) {
  uint64_t id = 1;
  while (engine.sequence(static_cast<SequenceId>(id)) != nullptr) ++id;
  return id;
}

// The request as a job starting in a step: KV for the busiest rank's prompt share and decode
// rows, and steps of up to that share (the whole prompt is one prefill entry).
StatusOr<control::StepStart> StartOf(Engine& engine, const GenerationRequest& request) {
  const int num_ranks = engine.comm().size();
  MP_ASSIGN_OR_RETURN(
      ShardPlan plan,
      ShardPlan::Create(static_cast<int64_t>(request.prompt_ids.size()), num_ranks));
  int64_t widest = 0;
  for (int r = 0; r < num_ranks; ++r) widest = std::max(widest, plan.RankPromptTokens(r));
  control::StepStart start;
  start.job = {.job_id = FreeJobId(engine),
               .prompt_ids = request.prompt_ids,
               .max_new_tokens = request.max_new_tokens,
               .sampling = request.sampling,
               .stop_ids = request.stop_ids,
               .ignore_eos = request.ignore_eos,
               .policy = request.policy};
  start.capacity_per_rank = widest + DecodeRowsPerRank(request.max_new_tokens, num_ranks);
  start.step_tokens = widest;
  return start;
}

// Runs a step of one job and returns what it did to the job: a token (a one-job plan's prompt is
// one entry). A step that failed or was cancelled, or a failed job, returns its status.
StatusOr<control::StepJobResult> RunJobStep(BatchRunner& runner, const control::StepPlan& plan,
                                            const LayerCallback& after_layer) {
  MP_ASSIGN_OR_RETURN(control::StepDone done, runner.Run(plan, after_layer));
  if (done.status_code != 0) return Status(static_cast<StatusCode>(done.status_code), done.message);
  MP_ASSERT(done.jobs.size() == 1, "a one-job step reports one job, got ", done.jobs.size());
  control::StepJobResult& r = done.jobs[0];
  if (r.outcome == StepOutcome::kFailed)
    return Status(static_cast<StatusCode>(r.status_code), r.message);
  MP_ASSERT(r.outcome == StepOutcome::kToken, "job ", r.job_id, " sampled no token");
  return std::move(r);
}

SampledToken TokenOf(const control::StepJobResult& r) {
  SampledToken t{r.token, r.logprob, {}};
  for (size_t i = 0; i < r.top_ids.size() && i < r.top_logprobs.size(); ++i)
    t.top.push_back({r.top_ids[i], r.top_logprobs[i]});
  return t;
}

}  // namespace

const char* FinishReasonName(FinishReason reason) {
  return reason == FinishReason::kStop ? "stop" : "length";
}

Status ValidateGenerationRequest(const Engine& engine, const GenerationRequest& request) {
  const ModelConfig& c = engine.config();
  const int64_t prompt = static_cast<int64_t>(request.prompt_ids.size());
  MP_REQUIRE(prompt > 0, "the prompt is empty");
  for (size_t i = 0; i < request.prompt_ids.size(); ++i) {
    const int32_t id = request.prompt_ids[i];
    MP_REQUIRE(id >= 0 && id < c.vocab_size, "prompt token ", i, " has id ", id,
               ", outside the vocabulary [0, ", c.vocab_size, ")");
  }
  for (int32_t id : request.stop_ids)
    MP_REQUIRE(id >= 0 && id < c.vocab_size, "stop id ", id, " is outside the vocabulary [0, ",
               c.vocab_size, ")");
  MP_REQUIRE(request.max_new_tokens >= 1, "max_new_tokens must be at least 1, got ",
             request.max_new_tokens);
  const int64_t limit = engine.max_context();
  MP_REQUIRE(prompt < limit, "the prompt has ", prompt, " tokens; the context limit is ", limit,
             " and at least one generated token must fit");
  MP_REQUIRE(request.max_new_tokens <= limit - prompt, "prompt (", prompt,
             " tokens) + max_new_tokens (", request.max_new_tokens,
             ") exceeds the context limit of ", limit, " tokens");
  MP_RETURN_IF_ERROR(CheckSamplingParams(request.sampling, c.vocab_size));
  if (request.policy) MP_RETURN_IF_ERROR(engine.CheckPolicy(*request.policy));
  return OkStatus();
}

StatusOr<GenerationResult> Generate(Engine& engine, const GenerationRequest& request,
                                    const TokenCallback& on_token,
                                    const ProgressCallback& on_progress) {
  MP_RETURN_IF_ERROR(ValidateGenerationRequest(engine, request));
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t prompt = static_cast<int64_t>(request.prompt_ids.size());
  MP_ASSIGN_OR_RETURN(control::StepStart start, StartOf(engine, request));
  const uint64_t job = start.job.job_id;
  LayerCallback after_layer;
  if (on_progress) {
    after_layer = [&](int64_t done, int64_t total) {
      return on_progress(done * prompt / total, prompt);
    };
  }
  // The runner frees the job's sequence (and with it the request's policy) on every exit path.
  BatchRunner runner(engine);
  control::StepPlan plan;
  plan.step_id = 1;
  plan.starts.push_back(std::move(start));
  plan.entries = {{job, StepEntryKind::kPrefill, 0, prompt}};
  GenerationResult result;
  result.prompt_tokens = prompt;
  std::chrono::steady_clock::time_point first_token;
  for (;;) {
    MP_ASSIGN_OR_RETURN(control::StepJobResult r, RunJobStep(runner, plan, after_layer));
    result.ids.push_back(r.token);
    if (result.ids.size() == 1) {
      first_token = std::chrono::steady_clock::now();
      result.ttft_s = SecondsSince(t0);
      result.prefill = {r.prefill_attended_pairs, r.prefill_causal_pairs};
    } else {
      result.decode_s = SecondsSince(first_token);
    }
    if (on_token && !on_token(TokenOf(r)))
      return CancelledError("generation cancelled by the caller");
    if (r.finished) {
      result.finish_reason = r.finished_by_stop ? FinishReason::kStop : FinishReason::kLength;
      return result;
    }
    // The next token: a decode entry at the sequence's length (the last token is not stored yet).
    const int64_t length = prompt + static_cast<int64_t>(result.ids.size()) - 1;
    plan.step_id += 1;
    plan.starts.clear();
    plan.entries = {{job, StepEntryKind::kDecode, length, 1}};
    after_layer = nullptr;
  }
}

}  // namespace millipede
