// The job table: adding, starting, requeueing and ending jobs, and their status.
#include "coordinator/job_table.h"

namespace millipede {
namespace {

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

StatusOr<JobId> JobTable::Add(std::shared_ptr<Job> job, int64_t kv_cost_per_rank) {
  control::JobDescriptor& d = job->descriptor;
  // Admission already held the job to one rank's KV capacity: the policy takes it.
  MP_RETURN_IF_ERROR(batch_.Add(next_id_, static_cast<int64_t>(d.prompt_ids.size()),
                                d.max_new_tokens, kv_cost_per_rank));
  job->id = next_id_++;
  d.job_id = job->id;
  jobs_[job->id] = job;
  queue_.push_back(job->id);
  if (metrics_) metrics_->JobQueued();
  return job->id;
}

std::shared_ptr<JobTable::Job> JobTable::Find(JobId id) const {
  auto it = jobs_.find(id);
  return it != jobs_.end() ? it->second : nullptr;
}

Status JobTable::RequestCancel(JobId id) {
  auto it = jobs_.find(id);
  if (it != jobs_.end()) {
    it->second->cancel_requested = true;
    return OkStatus();
  }
  // Ids are issued in order from 1 and a job leaves jobs_ only when it ends: an issued id that is
  // not there has ended, and cancelling it is a no-op (a client may race its own job's end).
  if (WasIssued(id)) return OkStatus();
  return NotFoundError("no job " + std::to_string(id));
}

JobStatusInfo JobTable::StatusOf(const Job& job) const {
  JobStatusInfo info;
  info.id = job.id;
  info.state = job.state;
  info.prompt_tokens = static_cast<int64_t>(job.descriptor.prompt_ids.size());
  info.prefill_done = job.prefill_done;
  info.generated_tokens = static_cast<int64_t>(job.ids.size());
  if (job.state == JobState::kQueued) {
    for (JobId q : queue_) {
      if (q == job.id) break;
      ++info.queue_position;
    }
  }
  return info;
}

StatusOr<JobStatusInfo> JobTable::GetStatus(JobId id) const {
  auto it = jobs_.find(id);
  if (it != jobs_.end()) return StatusOf(*it->second);
  auto ended = ended_.find(id);
  if (ended != ended_.end()) return ended->second;
  if (WasIssued(id))
    return NotFoundError("job " + std::to_string(id) +
                         " ended; the final status of only the last " + std::to_string(kEndedKept) +
                         " ended jobs is kept");
  return NotFoundError("no job " + std::to_string(id));
}

void JobTable::RemoveFromQueue(JobId id) {
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    if (*it == id) {
      queue_.erase(it);
      break;
    }
  }
}

void JobTable::Start(Job& job, Clock::time_point now) {
  job.state = JobState::kPrefill;
  job.started = now;
  RemoveFromQueue(job.id);
  if (metrics_) metrics_->JobStarted(Seconds(now - job.submitted));
}

bool JobTable::Requeue(Job& job) {
  if (!batch_.StartRefused(job.id).ok()) return false;
  job.state = JobState::kQueued;
  queue_.push_front(job.id);
  if (metrics_) metrics_->JobRequeued();
  return true;
}

const char* JobTable::DeliverError(Job& job, const Status& error, JobStatusInfo* info,
                                   Deliveries* out) const {
  const char* reason = "error";
  if (error.code() == StatusCode::kCancelled) {
    info->state = JobState::kCancelled;
    reason = "cancelled";
  } else {
    info->state = JobState::kFailed;
    info->error = error.ToString();
  }
  std::shared_ptr<JobObserver> observer = job.observer;
  if (job.held_token) {
    auto [token, delta] = *job.held_token;
    out->push_back([observer, token, delta] { observer->OnToken(token, delta); });
  }
  out->push_back([observer, e = error] { observer->OnError(e); });
  return reason;
}

const char* JobTable::DeliverCompletion(Job& job, double e2e_s, double decode_tps,
                                        Deliveries* out) const {
  std::shared_ptr<JobObserver> observer = job.observer;
  JobCompletion c;
  std::string rest = job.text->Finish();
  c.finish_reason =
      job.stop_matched || job.text->stopped() || job.stopped_by_id ? "stop" : "length";
  if (job.held_token) {
    auto [token, delta] = *job.held_token;
    out->push_back([observer, token, d = delta + rest] { observer->OnToken(token, d); });
  }
  c.ids = job.ids;
  c.text = job.text->text();
  c.prompt_tokens = static_cast<int64_t>(job.descriptor.prompt_ids.size());
  c.queue_s = Seconds(job.started - job.submitted);
  c.ttft_s = Seconds(job.first_token - job.submitted);
  c.e2e_s = e2e_s;
  const double prefill_s = Seconds(job.first_token - job.started);
  c.prefill_tokens_per_s = prefill_s > 0 ? c.prompt_tokens / prefill_s : 0;
  c.decode_tokens_per_s = decode_tps;
  c.prefill_attended_pairs = job.prefill_attended_pairs;
  c.prefill_causal_pairs = job.prefill_causal_pairs;
  const char* reason = c.finish_reason == "stop" ? "stop" : "length";
  out->push_back([observer, c] { observer->OnComplete(c); });
  return reason;
}

void JobTable::RememberEnded(const JobStatusInfo& info) {
  ended_[info.id] = info;
  ended_order_.push_back(info.id);
  while (ended_order_.size() > kEndedKept) {
    ended_.erase(ended_order_.front());
    ended_order_.pop_front();
  }
}

void JobTable::Finish(Job& job, std::optional<Status> error, Deliveries* out,
                      bool freed_by_workers) {
  const auto now = Clock::now();
  const bool started = job.state != JobState::kQueued;
  const double e2e = Seconds(now - job.submitted);
  JobStatusInfo info = StatusOf(job);
  info.queue_position = 0;
  double decode_tps = 0;
  if (job.ids.size() > 1 && job.last_token > job.first_token)
    decode_tps =
        static_cast<double>(job.ids.size() - 1) / Seconds(job.last_token - job.first_token);
  const char* reason;
  if (error) {
    reason = DeliverError(job, *error, &info, out);
  } else {
    info.state = JobState::kFinished;
    reason = DeliverCompletion(job, e2e, decode_tps, out);
  }
  job.held_token.reset();
  if (metrics_) metrics_->JobFinished(reason, started, e2e, decode_tps);
  RememberEnded(info);
  const JobId id = job.id;
  batch_.Remove(id, freed_by_workers);
  if (metrics_) metrics_->KvReserved(batch_.reserved_per_rank());
  RemoveFromQueue(id);
  jobs_.erase(id);                       // `job` may be gone from here on
  if (started) ReportPrefillProgress();  // 0 once no prompt is in prefill
}

void JobTable::FailAll(const Status& error, Deliveries* out) {
  std::vector<std::shared_ptr<Job>> all;
  for (auto& [id, job] : jobs_) all.push_back(job);
  for (auto& job : all) {
    if (metrics_) metrics_->RequestError(job->state == JobState::kQueued ? "internal" : "worker");
    Finish(*job, error, out, /*freed_by_workers=*/true);
  }
}

void JobTable::FailQueued(const Status& error, Deliveries* out) {
  std::vector<std::shared_ptr<Job>> waiting;
  for (JobId id : queue_) waiting.push_back(jobs_[id]);
  for (auto& job : waiting) Finish(*job, error, out, /*freed_by_workers=*/true);
}

void JobTable::ReportPrefillProgress() {
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
