// The coordinator's JobService: admission, a bounded FIFO queue, the job table, and the control
// loop that runs one job at a time on every worker rank over the MPI control plane.
//
// Threads: front ends call the JobService methods from their own threads (they take a mutex);
// Run() is the control loop and makes every MPI call of the coordinator; job events are
// delivered to observers from it, in order, with no lock held.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "api/job_service.h"
#include "common/tokenizer/tokenizer.h"
#include "coordinator/admission.h"
#include "coordinator/text_stream.h"
#include "coordinator/worker_link.h"
#include "monitoring/service_metrics.h"

namespace millipede {

struct SchedulerOptions {
  std::string model_id;
  std::string chat_format;
  // Jobs that may wait (the running one not counted); a full queue refuses with "queue full".
  size_t max_queue = 64;
  // A worker silent this long counts as dead (it reports at least at every prefill layer).
  double worker_timeout_s = 60;
  // After a drain starts, the running job may go on this long before it is cancelled.
  double drain_timeout_s = 30;
  int64_t max_prompt_bytes = 32 << 20;
};

class Scheduler final : public JobService {
 public:
  // `metrics` may be null (no metrics); it must outlive the scheduler.
  Scheduler(std::unique_ptr<Tokenizer> tokenizer, std::unique_ptr<WorkerLink> link,
            ServiceMetrics* metrics, SchedulerOptions options);
  ~Scheduler() override;

  // The control loop, on the coordinator's MPI thread. Returns OK once a drain finished and the
  // workers were told to stop; returns the failure after a worker died or the control plane
  // broke (every job then got that error, and the workers may be gone: the caller aborts).
  Status Run();
  // Starts a drain (new jobs refused, queued ones failed, the running one finished or
  // cancelled at the deadline). Async-signal-safe.
  void RequestDrain() { drain_requested_.store(true); }

  StatusOr<JobId> Submit(JobRequest request, std::shared_ptr<JobObserver> observer) override;
  void CountRefusal(std::string_view reason) override;
  Status Cancel(JobId id) override;
  StatusOr<JobStatusInfo> GetStatus(JobId id) const override;
  ModelInfo GetModelInfo() const override;
  HealthInfo GetHealth() const override;
  const Tokenizer& tokenizer() const override { return *tokenizer_; }
  std::vector<RankStats> GetWorkerStats() const override;

 private:
  using Clock = std::chrono::steady_clock;
  using Deliveries = std::vector<std::function<void()>>;
  struct Job;

  // One pass of the loop; sets *busy when it did something. Caller holds no lock.
  Status Step(Deliveries* out, bool* busy);
  Status HandleMessage(const control::Message& m, Deliveries* out);
  Status HandleEvent(const control::JobEvent& e, Deliveries* out);
  // Ends the running or a queued job (removing it from the table) with a completion or error.
  void Finish(Job& job, std::optional<Status> error, Deliveries* out);
  // Fails every job with `error` (worker failure).
  void FailAll(const Status& error, Deliveries* out);
  JobStatusInfo StatusOf(const Job& job) const;

  const std::unique_ptr<Tokenizer> tokenizer_;
  const std::unique_ptr<WorkerLink> link_;  // used by Run() only
  ServiceMetrics* const metrics_;
  const SchedulerOptions options_;
  const AdmissionLimits limits_;
  std::atomic<bool> drain_requested_{false};

  mutable std::mutex mu_;
  JobId next_id_ = 1;
  std::map<JobId, std::shared_ptr<Job>> jobs_;  // queued and running
  std::deque<JobId> queue_;
  std::shared_ptr<Job> running_;
  std::map<JobId, JobStatusInfo> ended_;  // the last kEndedKept ended jobs
  std::deque<JobId> ended_order_;
  bool draining_ = false;
  bool failed_ = false;
  std::string failure_;
  std::optional<Clock::time_point> last_token_;
  std::map<int, RankStats> rank_stats_;
};

}  // namespace millipede
