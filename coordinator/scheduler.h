// The coordinator's JobService: admission, a bounded queue, the job table, and the control loop
// that runs many jobs at once on every worker rank over the MPI control plane: each engine step
// is planned by the StepScheduler (step_scheduler.h: the batching policy), sent to every worker,
// and its outcome (tokens, finished and failed jobs) delivered before the next one is planned.
// Cancelling a job, or a stop string ending it, leaves it out of the next plan, which frees its
// KV on every rank; a step in flight that prefills a cancelled job is stopped inside.
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
#include "coordinator/admission.h"
#include "coordinator/step_scheduler.h"
#include "coordinator/text_stream.h"
#include "coordinator/worker_link.h"
#include "monitoring/service_metrics.h"
#include "tokenizer/tokenizer.h"

namespace millipede {

struct SchedulerOptions {
  std::string model_id;
  std::string chat_format;
  // Jobs that may wait (running ones not counted); a full queue refuses with "queue full".
  size_t max_queue = 64;
  // The batching policy (StepSchedulerOptions; the ranks and the KV budget come from the
  // workers' hello): tokens per step, jobs holding KV at once, the attention work bound of a
  // step's prefill chunks (0: none), the smallest chunk and the ring's cost per row (0: none).
  int64_t max_step_tokens = 2048;
  int64_t max_running = 64;
  int64_t max_prefill_work = 0;
  int64_t min_chunk = 256;
  int64_t ring_pairs_per_row = 0;
  // A worker silent this long counts as dead (each beats every half second from a thread of its
  // own, whatever it computes).
  double worker_timeout_s = 20;
  // A step that shows no progress (no prefill layer done, no result) for this long is stalled:
  // its jobs fail with DEVICE_ERROR saying so and are cancelled on the workers, who stay up.
  double stall_timeout_s = 600;
  // After a drain starts, running jobs may go on this long before they are cancelled.
  double drain_timeout_s = 30;
  int64_t max_prompt_bytes = 32 << 20;
};

class Scheduler final : public JobService {
 public:
  // `metrics` may be null (no metrics); it must outlive the scheduler. InvalidArgument for
  // batching options that cannot work.
  static StatusOr<std::unique_ptr<Scheduler>> Create(std::unique_ptr<Tokenizer> tokenizer,
                                                     std::unique_ptr<WorkerLink> link,
                                                     ServiceMetrics* metrics,
                                                     SchedulerOptions options);
  ~Scheduler() override;

  // The control loop, on the coordinator's MPI thread. Returns OK once a drain finished and the
  // workers were told to stop; returns the failure after a worker died or the control plane
  // broke (every job then got that error, and the workers may be gone: the caller aborts).
  Status Run();
  // Starts a drain (new jobs refused, queued ones failed, running ones finished or cancelled
  // at the deadline). Async-signal-safe.
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
  // The step the workers are running.
  struct InFlight {
    uint64_t step_id = 0;
    PlannedStep planned;
    std::vector<JobId> cancel_sent;  // jobs whose cancel went to the leader during the step
    bool stalled = false;
  };

  Scheduler(std::unique_ptr<Tokenizer> tokenizer, std::unique_ptr<WorkerLink> link,
            ServiceMetrics* metrics, SchedulerOptions options, StepScheduler batch);

  // Submit without the catch-all around it.
  StatusOr<JobId> SubmitChecked(JobRequest request, std::shared_ptr<JobObserver> observer);
  // One pass of the loop; sets *busy when it did something. Caller holds no lock.
  Status Step(Deliveries* out, bool* busy);
  Status HandleMessage(const control::Message& m, Deliveries* out);
  // The rest of the pass, under the lock: cancels, the drain, the next step.
  Status PlanLocked(Deliveries* out, bool* busy);
  // Ends cancelled jobs and jobs a stop string ended (between steps).
  void EndCancelledLocked(Deliveries* out);
  // Plans the next step and sends it (nothing when there is nothing to do).
  Status SendNextStepLocked(bool* busy);
  // A step in flight that prefills a cancelled job is stopped inside.
  Status CancelInsideStepLocked(bool* busy);
  // Fails the jobs of a step without progress for stall_timeout_s (once per step).
  void DetectStallLocked(Deliveries* out);
  Status HandleStepDone(const control::StepDone& done, Deliveries* out);
  void HandleToken(Job& job, const control::StepJobResult& r, Deliveries* out);
  void HandleJobFailed(Job& job, const control::StepJobResult& r, bool started_here,
                       Deliveries* out);
  // prefill_progress_ratio: the longest prompt in prefill.
  void ReportPrefillProgressLocked();
  // Ends a job (removing it from the table and the batching policy) with a completion or
  // error. `freed_by_workers`: the workers freed its sequence themselves (a finished or failed
  // job); otherwise the next step frees it.
  void Finish(Job& job, std::optional<Status> error, Deliveries* out, bool freed_by_workers);
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
  StepScheduler batch_;
  JobId next_id_ = 1;
  std::map<JobId, std::shared_ptr<Job>> jobs_;  // queued and running
  std::deque<JobId> queue_;                     // the queued ones, oldest first
  std::optional<InFlight> in_flight_;
  Clock::time_point last_progress_;  // the step in flight last showed progress
  uint64_t next_step_id_ = 1;
  std::map<JobId, JobStatusInfo> ended_;  // the last kEndedKept ended jobs
  std::deque<JobId> ended_order_;
  bool draining_ = false;
  bool failed_ = false;
  std::string failure_;
  std::optional<Clock::time_point> last_token_;
  std::map<int, RankStats> rank_stats_;
};

}  // namespace millipede
