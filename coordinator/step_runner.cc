// StepRunner between steps and during one: ending cancelled jobs, planning and sending the next
// step (StepScheduler), stopping a step that prefills a cancelled job, failing a stalled step.
#include "coordinator/step_runner.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <string>

namespace millipede {
namespace {

// The bound a latency target starts from and grows to: --max-prefill-work, or without it 10^8
// pairs (about 0.1 s of attention on one H200) and no ceiling.
constexpr int64_t kFirstWorkBound = 100'000'000;

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

control::StepEntryKind KindOf(PlannedKind kind) {
  return kind == PlannedKind::kPrefill ? control::StepEntryKind::kPrefill
                                       : control::StepEntryKind::kDecode;
}

}  // namespace

std::vector<RankStats> StepRunner::rank_stats() const {
  std::vector<RankStats> out;
  for (const auto& [rank, stats] : rank_stats_) out.push_back(stats);
  return out;
}

Status StepRunner::Advance(Deliveries* out, bool* busy) {
  if (in_flight_) {
    MP_RETURN_IF_ERROR(DetectStall(out));
    return CancelInsideStep(busy);
  }
  EndCancelled(out);
  table_.EvictForWaitingJobs(out);
  return SendNextStep(busy);
}

void StepRunner::EndCancelled(Deliveries* out) {
  std::vector<std::shared_ptr<Job>> ending;
  for (auto& [id, job] : table_.jobs())
    if (job->cancel_requested || job->stop_matched) ending.push_back(job);
  for (auto& job : ending) {
    if (job->stop_matched) {
      // A stop string ended the text: the job is complete; its KV goes with the next plan.
      table_.Finish(*job, std::nullopt, out, /*freed_by_workers=*/false);
    } else {
      table_.Finish(*job, CancelledError("job " + std::to_string(job->id) + " was cancelled"), out,
                    /*freed_by_workers=*/false);
    }
  }
}

StepRunner::StepRunner(WorkerLink* link, JobTable* table, ServiceMetrics* metrics,
                       StepRunnerOptions options)
    : link_(*link),
      table_(*table),
      metrics_(metrics),
      options_(options),
      work_control_(options.itl_target_s,
                    options.max_prefill_work > 0 ? options.max_prefill_work : kFirstWorkBound,
                    options.max_prefill_work > 0 ? options.max_prefill_work : int64_t{1} << 52) {}

void StepRunner::ReportDecodeBatches(const PlannedStep& planned) {
  std::map<std::string_view, int64_t> jobs;
  for (const PlannedEntry& e : planned.entries) {
    if (e.kind != PlannedKind::kDecode) continue;
    auto it = table_.jobs().find(e.job);
    if (it != table_.jobs().end()) ++jobs[it->second->decode_strategy];
  }
  for (const auto& [strategy, n] : jobs) metrics_->DecodeBatch(strategy, n);
}

Status StepRunner::SendNextStep(bool* busy) {
  StepScheduler& batch = table_.batch();
  if (options_.itl_target_s > 0) {
    const std::optional<int64_t> bound = work_control_.Bound(batch.decoding());
    batch.SetStepWorkBound(bound);
    if (metrics_) metrics_->PrefillWorkBound(bound.value_or(0));
  }
  PlannedStep planned = batch.Next();
  if (metrics_) {
    metrics_->KvAdmissionWaits(batch.jobs_waited_for_kv() - kv_waits_reported_);
    kv_waits_reported_ = batch.jobs_waited_for_kv();
  }
  if (planned.empty()) return OkStatus();
  *busy = true;
  control::StepPlan plan;
  plan.step_id = next_step_id_++;
  plan.ends = planned.ends;
  plan.drops = planned.drops;
  plan.demotes = planned.demotes;
  plan.promotes = planned.promotes;
  if (const PrefixCache* cache = table_.prefix_cache()) {
    // What the workers write with an entry: enough to index it again after a restart. An entry
    // the same plan drops again is not written.
    for (uint64_t id : planned.spills) {
      const PrefixEntry* e = cache->index().Find(id);
      if (e == nullptr) continue;
      plan.spills.push_back({.entry = id, .key = e->key, .model_key = cache->model_key(),
                             .tokens = e->tokens, .every_length = e->every_length,
                             .lengths = e->lengths, .length = 0, .stored = {}});
    }
  }
  plan.keeps = planned.keeps;
  const auto now = Clock::now();
  for (const PlannedStart& start : planned.starts) {
    Job& job = *table_.jobs().at(start.job);
    plan.starts.push_back({.job = job.descriptor,
                           .capacity_per_rank = start.capacity_per_rank,
                           .step_tokens = options_.max_step_tokens,
                           .prefix_from = start.prefix_from,
                           .prefix_tokens = start.prefix_tokens,
                           .prefix_take = start.prefix_take,
                           .prefix_share = start.prefix_share,
                           .keep = start.keep});
    table_.Start(job, now);
  }
  for (const PlannedEntry& e : planned.entries)
    plan.entries.push_back({e.job, KindOf(e.kind), e.begin, e.count});
  if (metrics_) {
    metrics_->StepRun(planned.decode_tokens(), planned.prefill_tokens());
    ReportDecodeBatches(planned);
  }
  table_.ReportKv();
  in_flight_ = InFlight{plan.step_id, std::move(planned), {}, false, {}, now};
  last_progress_ = now;
  return link_.SendStep(plan);
}

Status StepRunner::CancelInsideStep(bool* busy) {
  for (const PlannedEntry& e : in_flight_->planned.entries) {
    if (e.kind != PlannedKind::kPrefill) continue;
    std::shared_ptr<Job> job = table_.Find(e.job);
    if (job == nullptr || !(job->cancel_requested || job->stop_matched)) continue;
    MP_RETURN_IF_ERROR(SendCancel(e.job, busy));
  }
  return OkStatus();
}

Status StepRunner::SendCancel(JobId job, bool* busy) {
  std::vector<JobId>& sent = in_flight_->cancel_sent;
  if (std::find(sent.begin(), sent.end(), job) != sent.end()) return OkStatus();
  sent.push_back(job);
  *busy = true;
  return link_.CancelJob(job);
}

Status StepRunner::DetectStall(Deliveries* out) {
  const auto now = Clock::now();
  if (in_flight_->stalled) {
    if (Seconds(now - in_flight_->stalled_at) < options_.stall_abort_s) return OkStatus();
    char limit[32];
    std::snprintf(limit, sizeof(limit), "%g", options_.stall_abort_s);
    return DeviceError("step " + std::to_string(in_flight_->step_id) +
                       " stalled and did not stop within " + limit +
                       " s of its cancel (--stall-abort-s)");
  }
  const double silent = Seconds(now - last_progress_);
  if (silent < options_.stall_timeout_s) return OkStatus();
  in_flight_->stalled = true;
  in_flight_->stalled_at = now;
  const std::string why = "step " + std::to_string(in_flight_->step_id) + " made no progress for " +
                          std::to_string(static_cast<int>(silent)) +
                          " s (--stall-timeout-s): the workers are alive but stalled";
  std::cerr << "millipede-coordinator: " + why + "; failing its jobs\n";
  std::vector<std::shared_ptr<Job>> stuck;
  for (const PlannedEntry& e : in_flight_->planned.entries) {
    std::shared_ptr<Job> job = table_.Find(e.job);
    if (job != nullptr && std::find(stuck.begin(), stuck.end(), job) == stuck.end())
      stuck.push_back(job);
    // The step still holds the jobs on the workers: a cancel stops it at its next layer, and
    // the plan after it frees their KV. It goes now: the failed jobs leave the table below.
    bool sent = false;
    if (job != nullptr && e.kind == PlannedKind::kPrefill)
      MP_RETURN_IF_ERROR(SendCancel(e.job, &sent));
  }
  for (auto& job : stuck) {
    if (metrics_) metrics_->RequestError("worker");
    job->cancel_requested = true;
    table_.Finish(*job, DeviceError("job " + std::to_string(job->id) + ": " + why), out,
                  /*freed_by_workers=*/false);
  }
  return OkStatus();
}

}  // namespace millipede
