#include "worker/batch_runner.h"

#include <algorithm>
#include <chrono>
#include <iostream>
#include <span>

#include "common/shard_plan.h"
#include "worker/generate.h"
#include "worker/token_message.h"

namespace millipede {
namespace {

using control::StepEntryKind;
using control::StepJobResult;
using control::StepOutcome;

bool Contains(const std::vector<int32_t>& v, int32_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

StepJobResult Failed(uint64_t job_id, const Status& status) {
  StepJobResult r;
  r.job_id = job_id;
  r.outcome = StepOutcome::kFailed;
  r.status_code = static_cast<int32_t>(status.code());
  r.message = status.message();
  return r;
}

}  // namespace

BatchRunner::~BatchRunner() {
  for (const auto& [id, job] : jobs_) engine_.EndSequence(static_cast<SequenceId>(id));
}

int64_t BatchRunner::PromptTokens(uint64_t job_id) const {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? 0 : static_cast<int64_t>(it->second.descriptor.prompt_ids.size());
}

void BatchRunner::End(uint64_t job_id) {
  if (jobs_.erase(job_id) > 0) engine_.EndSequence(static_cast<SequenceId>(job_id));
}

void BatchRunner::Keep(uint64_t job_id) {
  if (jobs_.erase(job_id) == 0) return;
  Status kept = engine_.KeepSequence(static_cast<SequenceId>(job_id));
  if (kept.ok()) return;
  // Only a broken plan gets here (the id cached twice); the KV is freed, never served.
  std::cerr << "job " << job_id << ": not kept in the prefix cache: " << kept.ToString() << "\n";
  engine_.EndSequence(static_cast<SequenceId>(job_id));
}

void BatchRunner::Demote(uint64_t id) {
  Status demoted = engine_.DemoteCached(static_cast<SequenceId>(id));
  if (demoted.ok()) return;
  std::cerr << "prefix-cache entry " << id << ": not moved to host memory, freed: "
            << demoted.ToString() << "\n";
  engine_.DropCached(static_cast<SequenceId>(id));
}

void BatchRunner::Spill(const control::CacheEntryFacts& spill) {
  Status spilled = engine_.SpillCached(static_cast<SequenceId>(spill.entry),
                                       DiskEntryMeta{.id = spill.entry,
                                                     .key = spill.key,
                                                     .model_key = spill.model_key,
                                                     .tokens = spill.tokens,
                                                     .every_length = spill.every_length,
                                                     .lengths = spill.lengths});
  if (spilled.ok()) return;
  std::cerr << "prefix-cache entry " << spill.entry << ": not moved to disk, freed: "
            << spilled.ToString() << "\n";
  engine_.DropCached(static_cast<SequenceId>(spill.entry));
}

Status BatchRunner::Start(const control::StepStart& start) {
  Status started = StartJob(start);
  // A take-over's entry was given up by the coordinator: it goes whatever happened.
  if (!started.ok() && start.prefix_take)
    engine_.DropCached(static_cast<SequenceId>(start.prefix_from));
  return started;
}

Status BatchRunner::StartJob(const control::StepStart& start) {
  const control::JobDescriptor& d = start.job;
  MP_REQUIRE(d.job_id != 0 && jobs_.count(d.job_id) == 0, "job ", d.job_id,
             " cannot start: the id is 0 or already running");
  GenerationRequest request{.prompt_ids = d.prompt_ids,
                            .max_new_tokens = d.max_new_tokens,
                            .sampling = d.sampling,
                            .stop_ids = d.stop_ids,
                            .ignore_eos = d.ignore_eos,
                            .policy = d.policy};
  MP_RETURN_IF_ERROR(ValidateGenerationRequest(engine_, request));
  SequenceOptions options;
  options.capacity = start.capacity_per_rank;
  options.step_tokens = std::min(start.step_tokens, start.capacity_per_rank);
  options.policy = d.policy ? *d.policy : engine_.policy();
  options.decode_rows = DecodeRowsPerRank(d.max_new_tokens, engine_.comm().size());
  std::optional<CachedPrefix> prefix;
  if (start.prefix_from != 0) {
    MP_REQUIRE(start.prefix_tokens >= 1 &&
                   start.prefix_tokens < static_cast<int64_t>(d.prompt_ids.size()),
               "job ", d.job_id, ": a cached prefix of ", start.prefix_tokens,
               " tokens for a prompt of ", d.prompt_ids.size());
    prefix = CachedPrefix{static_cast<SequenceId>(start.prefix_from), start.prefix_tokens,
                          start.prefix_take, start.prefix_share};
    // A take-over keeps the entry's stores as they are, sized for the entry's steps; the job's
    // own steps, no more than what its prompt has left, need step buffers for no more (a
    // question after a long document, whose step buffers were freed).
    if (start.prefix_take)
      options.step_tokens = std::min(
          options.step_tokens, static_cast<int64_t>(d.prompt_ids.size()) - start.prefix_tokens);
  }
  // Every rank calls this with the same job: the memory plans are compared together.
  MP_RETURN_IF_ERROR(engine_.StartSequence(static_cast<SequenceId>(d.job_id), options, prefix));
  StatusOr<std::unique_ptr<TokenSampler>> sampler = TokenSampler::Create(
      engine_.backend(), d.sampling, engine_.config().vocab_size, d.prompt_ids);
  if (!sampler.ok()) {
    engine_.EndSequence(static_cast<SequenceId>(d.job_id));
    return sampler.status();
  }
  Job& job = jobs_[d.job_id];
  job.descriptor = d;
  job.keep = start.keep;
  job.sampler = std::move(sampler).value();
  return OkStatus();
}

StatusOr<SequenceStep> BatchRunner::ShareOf(const control::StepEntry& e, const Job& job) const {
  const auto id = static_cast<SequenceId>(e.job_id);
  if (e.kind == StepEntryKind::kDecode) {
    MP_REQUIRE(job.generated >= 1, "job ", e.job_id, " has no token to decode yet");
    return DecodeStep(id, job.last_token);
  }
  const auto prompt = static_cast<int64_t>(job.descriptor.prompt_ids.size());
  MP_REQUIRE(e.begin >= 0 && e.count >= 1 && e.begin + e.count <= prompt, "job ", e.job_id,
             ": prefill chunk [", e.begin, ", ", e.begin + e.count, ") is outside its prompt of ",
             prompt, " tokens");
  const std::span<const int32_t> ids(job.descriptor.prompt_ids);
  return ShardedPrefill(id, e.begin,
                        ids.subspan(static_cast<size_t>(e.begin), static_cast<size_t>(e.count)),
                        engine_.comm().rank(), engine_.comm().size());
}

StatusOr<int> BatchRunner::SamplingRank(const control::StepEntry& e, const Job& job) const {
  if (e.kind == StepEntryKind::kDecode) return 0;
  if (e.begin + e.count < static_cast<int64_t>(job.descriptor.prompt_ids.size())) return -1;
  return ShardPlan::LastTokenRank(e.count, engine_.comm().size());
}

void BatchRunner::Accept(Job& job, uint64_t job_id, const SampledToken& token,
                         control::StepDone* done) {
  Status accepted = job.sampler->Accept(token.id);
  if (!accepted.ok()) {
    done->jobs.push_back(Failed(job_id, accepted));
    End(job_id);
    return;
  }
  ++job.generated;
  job.last_token = token.id;
  StepJobResult r;
  r.job_id = job_id;
  r.outcome = StepOutcome::kToken;
  r.token = token.id;
  r.logprob = token.logprob;
  for (const TokenLogprob& t : token.top) {
    r.top_ids.push_back(t.id);
    r.top_logprobs.push_back(t.logprob);
  }
  const control::JobDescriptor& d = job.descriptor;
  r.finished_by_stop = Contains(d.stop_ids, token.id) ||
                       (!d.ignore_eos && Contains(engine_.config().eos_token_ids, token.id));
  r.finished = r.finished_by_stop || job.generated >= d.max_new_tokens;
  done->jobs.push_back(std::move(r));
  if (!done->jobs.back().finished) return;
  if (job.keep) {
    Keep(job_id);
  } else {
    End(job_id);
  }
}

Status BatchRunner::SampleAll(const std::vector<Planned>& planned, const StepOutput& output,
                              control::StepDone* done) {
  Communicator& comm = engine_.comm();
  const int rank = comm.rank();
  std::vector<TokenMessage> tokens(planned.size());
  std::vector<int> roots(planned.size(), -1);
  for (size_t i = 0; i < planned.size(); ++i) {
    const Planned& p = planned[i];
    MP_ASSIGN_OR_RETURN(roots[i], SamplingRank(*p.entry, *p.job));
    if (roots[i] != rank) continue;
    MP_ASSERT(output.logits[i].has_value(), "no logits for job ", p.entry->job_id, " on rank ",
              rank);
    StatusOr<SampledToken> drawn =
        p.job->sampler->Sample(*output.logits[i], static_cast<uint64_t>(p.job->generated));
    if (drawn.ok()) {
      tokens[i] = TokenMessage::From(*drawn);
    } else {
      tokens[i].status_code = static_cast<int32_t>(drawn.status().code());
      std::cerr << "job " << p.entry->job_id << ": sampling failed on rank " << rank << ": "
                << drawn.status().ToString() << "\n";
    }
  }
  // Decode tokens come from rank 0 in one broadcast; a prompt's first token from its rank.
  if (comm.size() > 1) {
    std::vector<TokenMessage> from_zero;
    for (size_t i = 0; i < planned.size(); ++i)
      if (roots[i] == 0) from_zero.push_back(tokens[i]);
    if (!from_zero.empty())
      MP_RETURN_IF_ERROR(
          comm.HostBroadcast(from_zero.data(), from_zero.size() * sizeof(TokenMessage), 0));
    for (size_t i = 0, z = 0; i < planned.size(); ++i) {
      if (roots[i] == 0) tokens[i] = from_zero[z++];
      if (roots[i] > 0)
        MP_RETURN_IF_ERROR(comm.HostBroadcast(&tokens[i], sizeof(TokenMessage), roots[i]));
    }
  }
  for (size_t i = 0; i < planned.size(); ++i) {
    const uint64_t id = planned[i].entry->job_id;
    if (roots[i] < 0) {
      StepJobResult r;
      r.job_id = id;
      r.outcome = StepOutcome::kPrefilled;
      done->jobs.push_back(r);
    } else if (tokens[i].status_code != 0) {
      done->jobs.push_back(
          Failed(id, Status(static_cast<StatusCode>(tokens[i].status_code),
                            "sampling failed on worker rank " + std::to_string(roots[i]))));
      End(id);
    } else {
      Accept(*planned[i].job, id, tokens[i].ToToken(), done);
    }
    if (planned[i].entry->kind == StepEntryKind::kPrefill && i < output.prefill.size()) {
      done->jobs.back().prefill_attended_pairs = output.prefill[i].attended_pairs;
      done->jobs.back().prefill_causal_pairs = output.prefill[i].causal_pairs;
    }
  }
  return OkStatus();
}

StatusOr<control::StepDone> BatchRunner::Run(const control::StepPlan& plan,
                                             const LayerCallback& after_layer) {
  const auto t0 = std::chrono::steady_clock::now();
  control::StepDone done;
  done.step_id = plan.step_id;
  for (uint64_t id : plan.demotes) Demote(id);
  for (const control::CacheEntryFacts& spill : plan.spills) Spill(spill);
  // Host memory of entries the disk tier has written is freed here, on this thread.
  if (engine_.disk_tier() != nullptr) engine_.disk_tier()->Collect();
  for (uint64_t id : plan.drops) engine_.DropCached(static_cast<SequenceId>(id));
  for (uint64_t id : plan.promotes) engine_.PromoteCached(static_cast<SequenceId>(id));
  for (uint64_t id : plan.ends) End(id);
  for (uint64_t id : plan.keeps) Keep(id);
  std::vector<uint64_t> failed;
  for (const control::StepStart& start : plan.starts) {
    Status s = Start(start);
    if (s.ok()) continue;
    done.jobs.push_back(Failed(start.job.job_id, s));
    failed.push_back(start.job.job_id);
  }
  StepPlan step;
  std::vector<Planned> planned;
  for (const control::StepEntry& e : plan.entries) {
    auto it = jobs_.find(e.job_id);
    if (it == jobs_.end()) {
      // A job whose start failed above has its result already.
      if (std::find(failed.begin(), failed.end(), e.job_id) == failed.end()) {
        done.jobs.push_back(Failed(e.job_id, NotFoundError("job " + std::to_string(e.job_id) +
                                                           " is not running on the workers")));
        failed.push_back(e.job_id);
      }
      continue;
    }
    StatusOr<SequenceStep> share = ShareOf(e, it->second);
    if (!share.ok()) {
      done.jobs.push_back(Failed(e.job_id, share.status()));
      End(e.job_id);
      continue;
    }
    step.steps.push_back(std::move(share).value());
    planned.push_back({&e, &it->second});
  }
  if (!planned.empty()) {
    StatusOr<StepOutput> output = engine_.RunStep(step, after_layer);
    if (output.ok()) {
      MP_RETURN_IF_ERROR(SampleAll(planned, *output, &done));
    } else {
      done.status_code = static_cast<int32_t>(output.status().code());
      done.message = output.status().message();
      if (output.status().code() != StatusCode::kCancelled) {
        for (const Planned& p : planned) {
          done.jobs.push_back(Failed(p.entry->job_id, output.status()));
          End(p.entry->job_id);
        }
      }
    }
  }
  done.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return done;
}

}  // namespace millipede
