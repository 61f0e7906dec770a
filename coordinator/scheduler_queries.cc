// Scheduler: the JobService queries (a job's status, the model, health, the workers' stats),
// answered from the job table and the latest worker reports under the scheduler's lock.
#include "coordinator/scheduler.h"
#include "coordinator/scheduler_job.h"

namespace millipede {

JobStatusInfo Scheduler::StatusOf(const Job& job) const {
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

StatusOr<JobStatusInfo> Scheduler::GetStatus(JobId id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(id);
  if (it != jobs_.end()) return StatusOf(*it->second);
  auto ended = ended_.find(id);
  if (ended != ended_.end()) return ended->second;
  return NotFoundError("no job " + std::to_string(id));
}

ModelInfo Scheduler::GetModelInfo() const {
  ModelInfo info;
  info.id = options_.model_id;
  info.context_limit = limits_.context_limit;
  info.kv_capacity_tokens =
      std::min(limits_.context_limit, limits_.kv_capacity_per_rank * limits_.num_workers);
  info.vocab_size = limits_.vocab_size;
  info.num_workers = limits_.num_workers;
  info.chat_format = options_.chat_format;
  return info;
}

HealthInfo Scheduler::GetHealth() const {
  std::lock_guard<std::mutex> lock(mu_);
  HealthInfo h;
  h.alive = !failed_;
  h.accepting = !failed_ && !draining_ && !drain_requested_.load();
  h.running = batch_.running();
  h.waiting = static_cast<int64_t>(queue_.size());
  if (last_token_)
    h.seconds_since_last_token = std::chrono::duration<double>(Clock::now() - *last_token_).count();
  if (failed_) {
    h.detail = failure_;
  } else if (!h.accepting) {
    h.detail = "shutting down";
  }
  return h;
}

std::vector<RankStats> Scheduler::GetWorkerStats() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<RankStats> out;
  for (const auto& [rank, stats] : rank_stats_) out.push_back(stats);
  return out;
}

}  // namespace millipede
