// StepRunner: what the workers report — a step's results (prefill done, tokens, finished and
// failed jobs), a job's prefill progress and the workers' stats — delivered to the jobs.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "coordinator/step_runner.h"

namespace millipede {
namespace {

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

Status StepRunner::HandleMessage(const control::Message& m, Deliveries* out) {
  if (m.tag == control::kTagHeartbeat) return OkStatus();  // the link noted the sender alive
  if (m.tag == control::kTagStepDone) {
    control::StepDone done;
    MP_RETURN_IF_ERROR(control::Decode(m.bytes, &done));
    MP_ASSERT(m.source == control::kLeaderRank, "step result from rank ", m.source);
    return HandleStepDone(done, out);
  }
  if (m.tag == control::kTagProgress) {
    control::JobProgress p;
    MP_RETURN_IF_ERROR(control::Decode(m.bytes, &p));
    HandleProgress(p, out);
    return OkStatus();
  }
  if (m.tag == control::kTagStats) {
    control::WorkerStats w;
    MP_RETURN_IF_ERROR(control::Decode(m.bytes, &w));
    HandleStats(m.source, w);
    return OkStatus();
  }
  return InternalError("unexpected control message (tag " + std::to_string(m.tag) + ") from rank " +
                       std::to_string(m.source));
}

void StepRunner::HandleProgress(const control::JobProgress& p, Deliveries* out) {
  std::shared_ptr<Job> job = table_.Find(p.job_id);
  if (job == nullptr || job->cancel_requested || job->stop_matched) return;
  last_progress_ = Clock::now();
  job->prefill_done = p.tokens_done;
  table_.ReportPrefillProgress();
  std::shared_ptr<JobObserver> observer = job->observer;
  out->push_back([observer, d = p.tokens_done, t = p.tokens_total] { observer->OnProgress(d, t); });
}

void StepRunner::HandleStats(int rank, const control::WorkerStats& w) {
  table_.NotePromotions(rank, w.promoted, w.promote_failed);
  RankStats r{.rank = rank,
              .kv_bytes_gpu = w.kv_bytes_gpu,
              .kv_bytes_host = w.kv_bytes_host,
              .attention_s = w.attention_s,
              .comm_s = w.comm_s,
              .comm_bytes = w.comm_bytes,
              .cache_bytes_gpu = w.cache_bytes_gpu,
              .cache_bytes_host = w.cache_bytes_host,
              .cache_bytes_disk = w.cache_bytes_disk,
              .cache_save_s = w.cache_save_s,
              .cache_write_s = w.cache_write_s,
              .cache_load_s = w.cache_load_s};
  rank_stats_[rank] = r;
  if (metrics_) metrics_->UpdateRank(r);
}

Status StepRunner::HandleStepDone(const control::StepDone& done, Deliveries* out) {
  MP_ASSERT(in_flight_ && done.step_id == in_flight_->step_id, "a result for step ", done.step_id,
            " which is not in flight");
  const PlannedStep planned = std::move(in_flight_->planned);
  const auto now = Clock::now();
  const double seconds = Seconds(now - in_flight_->sent_at);
  if (in_flight_->stalled) {
    const bool stopped = done.status_code == static_cast<int32_t>(StatusCode::kCancelled);
    char after[32];
    std::snprintf(after, sizeof(after), "%.1f", Seconds(now - in_flight_->stalled_at));
    std::cerr << "millipede-coordinator: stalled step " + std::to_string(done.step_id) +
                     (stopped ? " stopped " : " ran to its end ") + after +
                     " s after its jobs failed\n";
  }
  in_flight_.reset();
  // A cancelled step committed nothing: its work is planned again.
  if (done.status_code == 0) {
    TimeStep(planned, seconds);
    table_.batch().Completed(planned);
    std::vector<JobId> failed;
    for (const control::StepJobResult& r : done.jobs)
      if (r.outcome == control::StepOutcome::kFailed) failed.push_back(r.job_id);
    table_.RecordCommitted(planned, failed);
  }
  for (const control::StepJobResult& r : done.jobs) {
    std::shared_ptr<Job> job = table_.Find(r.job_id);  // Finish may drop the table's reference
    if (job != nullptr) HandleResult(*job, r, planned, out);
  }
  if (done.status_code != 0 && done.status_code != static_cast<int32_t>(StatusCode::kCancelled))
    std::cerr << "millipede-coordinator: step " + std::to_string(done.step_id) +
                     " failed on the workers: " + done.message + "\n";
  table_.ReportPrefillProgress();
  return OkStatus();
}

void StepRunner::TimeStep(const PlannedStep& planned, double seconds) {
  const StepScheduler& batch = table_.batch();
  const int64_t decoded = planned.decode_tokens(), prefilled = planned.prefill_tokens();
  const double work = batch.StepWork(planned);
  const bool computed_alone = planned.starts.empty() && planned.ends.empty() &&
                              planned.drops.empty() && planned.keeps.empty() &&
                              planned.demotes.empty() && planned.spills.empty() &&
                              planned.promotes.empty() && !planned.entries.empty();
  if (computed_alone) step_time_.Observe(static_cast<double>(decoded + prefilled), work, seconds);
  if (decoded == 0) return;
  if (computed_alone) work_control_.Observe(work, seconds);
  double waited = 0;
  if (prefilled > 0)
    if (const std::optional<double> alone = step_time_.Predict(static_cast<double>(decoded), 0))
      waited = std::max(0.0, seconds - *alone);
  if (metrics_) metrics_->DecodeStep(seconds, options_.itl_target_s, waited);
}

void StepRunner::HandleResult(Job& job, const control::StepJobResult& r, const PlannedStep& planned,
                              Deliveries* out) {
  const bool ending = job.cancel_requested || job.stop_matched;
  switch (r.outcome) {
    case control::StepOutcome::kPrefilled:
      for (const PlannedEntry& e : planned.entries)
        if (e.job == r.job_id) {
          job.prefill_done = e.begin + e.count;
          if (metrics_) metrics_->PromptTokens(e.count);
        }
      break;
    case control::StepOutcome::kToken:
      if (job.ids.empty() && metrics_)
        for (const PlannedEntry& e : planned.entries)
          if (e.job == r.job_id) metrics_->PromptTokens(e.count);
      if (!ending) HandleToken(job, r, out);
      if (r.finished) {
        job.stopped_by_id = r.finished_by_stop;
        if (job.cancel_requested && !job.stop_matched) {
          table_.Finish(job, CancelledError("job " + std::to_string(job.id) + " was cancelled"),
                        out, /*freed_by_workers=*/true);
        } else {
          table_.Finish(job, std::nullopt, out, /*freed_by_workers=*/true);
        }
      }
      break;
    case control::StepOutcome::kFailed: {
      bool started_here = false;
      for (const PlannedStart& s : planned.starts) started_here |= s.job == r.job_id;
      HandleJobFailed(job, r, started_here, out);
      break;
    }
  }
}

void StepRunner::HandleToken(Job& job, const control::StepJobResult& r, Deliveries* out) {
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

void StepRunner::HandleJobFailed(Job& job, const control::StepJobResult& r, bool started_here,
                                 Deliveries* out) {
  const auto code = static_cast<StatusCode>(r.status_code);
  // The workers' memory plan could not hold it beside the running jobs: wait for one to end.
  if (code == StatusCode::kResourceExhausted && started_here && table_.Requeue(job)) return;
  // Its cached prefix could not be restored (a corrupted or lost file, for one): computed again.
  if (started_here && job.cached_from != 0 && table_.RetryUncached(job)) {
    std::cerr << "job " << job.id << ": its cached prefix could not be restored (" << r.message
              << "); running it uncached\n";
    return;
  }
  if (metrics_) metrics_->RequestError("worker");
  table_.Finish(job, Status(code, "the workers failed the job: " + r.message), out,
                /*freed_by_workers=*/true);
}

}  // namespace millipede
