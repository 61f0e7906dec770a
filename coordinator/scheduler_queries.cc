// Scheduler: the JobService queries (a job's status, the model, health, the workers' stats),
// answered from the job table and the latest worker reports under the scheduler's lock.
#include "coordinator/scheduler.h"

namespace millipede {

StatusOr<JobStatusInfo> Scheduler::GetStatus(JobId id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return table_.GetStatus(id);
}

ModelInfo Scheduler::GetModelInfo() const {
  ModelInfo info;
  info.id = options_.model_id;
  info.context_limit = limits_.context_limit;
  info.kv_capacity_tokens =
      std::min(limits_.context_limit, limits_.kv_capacity_per_rank * limits_.num_workers);
  info.max_model_len = MaxModelLen(limits_);
  info.vocab_size = limits_.vocab_size;
  info.num_workers = limits_.num_workers;
  info.chat_format = options_.chat_format;
  return info;
}

HealthInfo Scheduler::GetHealth() const {
  std::lock_guard<std::mutex> lock(mu_);
  HealthInfo h;
  // A silent worker is not known to be up: not alive until it beats again (or is declared dead).
  h.alive = !failed_ && suspect_.empty();
  h.accepting = h.alive && !draining_ && !drain_requested_.load();
  h.running = table_.batch().running();
  h.waiting = static_cast<int64_t>(table_.num_queued());
  if (std::optional<Clock::time_point> last_token = steps_.last_token())
    h.seconds_since_last_token = std::chrono::duration<double>(Clock::now() - *last_token).count();
  if (failed_) {
    h.detail = failure_;
  } else if (!suspect_.empty()) {
    h.detail = suspect_;
  } else if (!h.accepting) {
    h.detail = "shutting down";
  }
  return h;
}

std::vector<RankStats> Scheduler::GetWorkerStats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return steps_.rank_stats();
}

StatusOr<std::vector<CacheEntryInfo>> Scheduler::ListCache() const {
  std::lock_guard<std::mutex> lock(mu_);
  return table_.ListCache();
}

Status Scheduler::PinCacheEntry(uint64_t id, bool pinned) {
  std::lock_guard<std::mutex> lock(mu_);
  return table_.PinCacheEntry(id, pinned);
}

Status Scheduler::DropCacheEntry(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  return table_.DropCacheEntry(id);
}

}  // namespace millipede
