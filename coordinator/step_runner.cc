// Scheduler: the steps — ending cancelled jobs between steps, planning and sending the next step
// (StepScheduler), stopping a step that prefills a cancelled job, and delivering a step's
// outcome to the jobs.
#include <algorithm>
#include <iostream>

#include "coordinator/scheduler.h"
#include "coordinator/scheduler_job.h"

namespace millipede {
namespace {

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

control::StepEntryKind KindOf(PlannedKind kind) {
  return kind == PlannedKind::kPrefill ? control::StepEntryKind::kPrefill
                                       : control::StepEntryKind::kDecode;
}

}  // namespace

void Scheduler::EndCancelledLocked(Deliveries* out) {
  std::vector<std::shared_ptr<Job>> ending;
  for (auto& [id, job] : jobs_)
    if (job->cancel_requested || job->stop_matched) ending.push_back(job);
  for (auto& job : ending) {
    if (job->stop_matched) {
      // A stop string ended the text: the job is complete; its KV goes with the next plan.
      Finish(*job, std::nullopt, out, /*freed_by_workers=*/false);
    } else {
      Finish(*job, CancelledError("job " + std::to_string(job->id) + " was cancelled"), out,
             /*freed_by_workers=*/false);
    }
  }
}

Status Scheduler::SendNextStepLocked(bool* busy) {
  PlannedStep planned = batch_.Next();
  if (planned.empty()) return OkStatus();
  *busy = true;
  control::StepPlan plan;
  plan.step_id = next_step_id_++;
  plan.ends = planned.ends;
  const auto now = Clock::now();
  for (const PlannedStart& start : planned.starts) {
    Job& job = *jobs_.at(start.job);
    plan.starts.push_back({job.descriptor, start.capacity_per_rank, options_.max_step_tokens});
    job.state = JobState::kPrefill;
    job.started = now;
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if (*it == start.job) {
        queue_.erase(it);
        break;
      }
    }
    if (metrics_) metrics_->JobStarted(Seconds(now - job.submitted));
  }
  for (const PlannedEntry& e : planned.entries)
    plan.entries.push_back({e.job, KindOf(e.kind), e.begin, e.count});
  if (metrics_) {
    metrics_->StepRun(planned.decode_tokens(), planned.prefill_tokens());
    metrics_->KvReserved(batch_.reserved_per_rank());
  }
  in_flight_ = InFlight{plan.step_id, std::move(planned), {}, false};
  last_progress_ = now;
  return link_->SendStep(plan);
}

Status Scheduler::CancelInsideStepLocked(bool* busy) {
  for (const PlannedEntry& e : in_flight_->planned.entries) {
    if (e.kind != PlannedKind::kPrefill) continue;
    auto it = jobs_.find(e.job);
    if (it == jobs_.end() || !(it->second->cancel_requested || it->second->stop_matched)) continue;
    std::vector<JobId>& sent = in_flight_->cancel_sent;
    if (std::find(sent.begin(), sent.end(), e.job) != sent.end()) continue;
    sent.push_back(e.job);
    *busy = true;
    MP_RETURN_IF_ERROR(link_->CancelJob(e.job));
  }
  return OkStatus();
}

void Scheduler::DetectStallLocked(Deliveries* out) {
  const double silent = Seconds(Clock::now() - last_progress_);
  if (in_flight_->stalled || silent < options_.stall_timeout_s) return;
  in_flight_->stalled = true;
  const std::string why = "step " + std::to_string(in_flight_->step_id) + " made no progress for " +
                          std::to_string(static_cast<int>(silent)) +
                          " s (--stall-timeout-s): the workers are alive but stalled";
  std::cerr << "millipede-coordinator: " + why + "; failing its jobs\n";
  std::vector<std::shared_ptr<Job>> stuck;
  for (const PlannedEntry& e : in_flight_->planned.entries) {
    auto it = jobs_.find(e.job);
    if (it != jobs_.end() && std::find(stuck.begin(), stuck.end(), it->second) == stuck.end())
      stuck.push_back(it->second);
  }
  for (auto& job : stuck) {
    if (metrics_) metrics_->RequestError("worker");
    // The step still holds the jobs on the workers: a cancel stops it at its next layer, and
    // the plan after it frees their KV.
    job->cancel_requested = true;
    Finish(*job, DeviceError("job " + std::to_string(job->id) + ": " + why), out,
           /*freed_by_workers=*/false);
  }
}

Status Scheduler::PlanLocked(Deliveries* out, bool* busy) {
  if (drain_requested_.load() && !draining_) {
    draining_ = true;
    *busy = true;
    std::vector<std::shared_ptr<Job>> waiting;
    for (JobId id : queue_) waiting.push_back(jobs_[id]);
    for (auto& job : waiting)
      Finish(*job, FailedPreconditionError("the service is shutting down"), out, true);
  }
  if (in_flight_) {
    DetectStallLocked(out);
    return CancelInsideStepLocked(busy);
  }
  EndCancelledLocked(out);
  return SendNextStepLocked(busy);
}

void Scheduler::HandleToken(Job& job, const control::StepJobResult& r, Deliveries* out) {
  std::shared_ptr<JobObserver> observer = job.observer;
  const auto now = Clock::now();
  last_token_ = now;
  if (job.ids.empty()) {
    job.state = JobState::kDecode;
    job.first_token = now;
    job.prefill_done = static_cast<int64_t>(job.descriptor.prompt_ids.size());
    job.prefill_attended_pairs = r.prefill_attended_pairs;
    job.prefill_causal_pairs = r.prefill_causal_pairs;
    const double prefill_s = Seconds(now - job.started);
    if (metrics_)
      metrics_->FirstToken(Seconds(now - job.submitted),
                           prefill_s > 0 ? job.prefill_done / prefill_s : 0);
    if (metrics_ && r.prefill_causal_pairs > 0)
      metrics_->PrefillDensity(static_cast<double>(r.prefill_attended_pairs) /
                               static_cast<double>(r.prefill_causal_pairs));
    if (metrics_) metrics_->OutputToken(0);
  } else if (metrics_) {
    metrics_->OutputToken(Seconds(now - job.last_token));
  }
  job.last_token = now;
  job.ids.push_back(r.token);
  SampledToken token{r.token, r.logprob, {}};
  for (size_t i = 0; i < r.top_ids.size(); ++i)
    token.top.push_back({r.top_ids[i], r.top_logprobs[i]});
  StatusOr<TextStream::Piece> piece = job.text->Push(r.token);
  if (!piece.ok()) {
    job.cancel_requested = true;  // cannot happen with ids the workers checked; end the job
    return;
  }
  if (job.held_token) {
    auto [held, delta] = *job.held_token;
    out->push_back([observer, held, delta] { observer->OnToken(held, delta); });
    job.held_token.reset();
  }
  if (piece->open) {
    job.held_token.emplace(std::move(token), std::move(piece->delta));
  } else {
    out->push_back([observer, token = std::move(token), d = std::move(piece->delta)] {
      observer->OnToken(token, d);
    });
  }
  if (piece->stopped) job.stop_matched = true;
}

void Scheduler::HandleJobFailed(Job& job, const control::StepJobResult& r, bool started_here,
                                Deliveries* out) {
  const auto code = static_cast<StatusCode>(r.status_code);
  if (code == StatusCode::kResourceExhausted && started_here) {
    // The workers' memory plan could not hold it beside the running jobs: wait for one to end.
    Status waits = batch_.StartRefused(job.id);
    if (waits.ok()) {
      job.state = JobState::kQueued;
      queue_.push_front(job.id);
      if (metrics_) metrics_->JobRequeued();
      return;
    }
  }
  if (metrics_) metrics_->RequestError("worker");
  Finish(job, Status(code, "the workers failed the job: " + r.message), out,
         /*freed_by_workers=*/true);
}

Status Scheduler::HandleStepDone(const control::StepDone& done, Deliveries* out) {
  MP_ASSERT(in_flight_ && done.step_id == in_flight_->step_id, "a result for step ", done.step_id,
            " which is not in flight");
  const PlannedStep planned = std::move(in_flight_->planned);
  in_flight_.reset();
  // A cancelled step committed nothing: its work is planned again.
  if (done.status_code == 0) batch_.Completed(planned);
  for (const control::StepJobResult& r : done.jobs) {
    auto it = jobs_.find(r.job_id);
    if (it == jobs_.end()) continue;
    std::shared_ptr<Job> job = it->second;  // Finish may drop the table's reference
    const bool ending = job->cancel_requested || job->stop_matched;
    switch (r.outcome) {
      case control::StepOutcome::kPrefilled:
        for (const PlannedEntry& e : planned.entries)
          if (e.job == r.job_id) {
            job->prefill_done = e.begin + e.count;
            if (metrics_) metrics_->PromptTokens(e.count);
          }
        break;
      case control::StepOutcome::kToken:
        if (job->ids.empty() && metrics_)
          for (const PlannedEntry& e : planned.entries)
            if (e.job == r.job_id) metrics_->PromptTokens(e.count);
        if (!ending) HandleToken(*job, r, out);
        if (r.finished) {
          job->stopped_by_id = r.finished_by_stop;
          if (job->cancel_requested && !job->stop_matched) {
            Finish(*job, CancelledError("job " + std::to_string(job->id) + " was cancelled"), out,
                   /*freed_by_workers=*/true);
          } else {
            Finish(*job, std::nullopt, out, /*freed_by_workers=*/true);
          }
        }
        break;
      case control::StepOutcome::kFailed: {
        bool started_here = false;
        for (const PlannedStart& s : planned.starts) started_here |= s.job == r.job_id;
        HandleJobFailed(*job, r, started_here, out);
        break;
      }
    }
  }
  if (done.status_code != 0 && done.status_code != static_cast<int32_t>(StatusCode::kCancelled))
    std::cerr << "millipede-coordinator: step " + std::to_string(done.step_id) +
                     " failed on the workers: " + done.message + "\n";
  ReportPrefillProgressLocked();
  return OkStatus();
}

void Scheduler::ReportPrefillProgressLocked() {
  if (metrics_ == nullptr) return;
  int64_t longest = 0;
  double ratio = 0;
  for (const auto& [id, job] : jobs_) {
    const auto prompt = static_cast<int64_t>(job->descriptor.prompt_ids.size());
    if (job->state != JobState::kPrefill || prompt <= longest) continue;
    longest = prompt;
    ratio = static_cast<double>(job->prefill_done) / static_cast<double>(prompt);
  }
  metrics_->PrefillProgress(ratio);
}

}  // namespace millipede
