// The coordinator's JobService: admission, a bounded queue, the job table, and the control loop
// that runs many jobs at once on every worker rank over the MPI control plane: each engine step
// is planned by the StepScheduler (step_scheduler.h: the batching policy), sent to every worker,
// and its outcome (tokens, finished and failed jobs) delivered before the next one is planned.
// Cancelling a job, or a stop string ending it, leaves it out of the next plan, which frees its
// KV on every rank; a step in flight that prefills a cancelled job is stopped inside.
//
// The parts: JobTable (job_table.h) holds the jobs, the queue and the batching policy;
// StepRunner (step_runner.h) plans and sends the steps and takes the workers' reports to the
// jobs; the Scheduler admits jobs, answers the queries, drains, and runs the loop over both.
//
// Threads: front ends call the JobService methods from their own threads (they take a mutex);
// Run() is the control loop and makes every MPI call of the coordinator; job events are
// delivered to observers from it, in order, with no lock held.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "api/job_service.h"
#include "coordinator/admission.h"
#include "coordinator/job_table.h"
#include "coordinator/step_runner.h"
#include "coordinator/step_scheduler.h"
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
  // Inter-token latency target in seconds (0: none): while jobs decode, a step's prefill work is
  // bounded by what the step time model says fits (StepRunnerOptions::itl_target_s).
  double itl_target_s = 0;
  // A worker silent this long counts as dead (each beats every half second from a thread of its
  // own, whatever it computes).
  double worker_timeout_s = 20;
  // A worker silent this long (but not yet dead) makes the service unavailable: health and
  // readiness fail and new jobs are refused with FailedPrecondition until it beats again.
  double worker_suspect_s = 1.5;
  // A step that shows no progress (no prefill layer done, no result) for this long is stalled:
  // its jobs fail with DEVICE_ERROR saying so and are cancelled on the workers, who stay up.
  double stall_timeout_s = 600;
  // A stalled step that has not returned this long after its cancel ends the service (Run()
  // fails), so that a supervisor restarts it.
  double stall_abort_s = 600;
  // After a drain starts, running jobs may go on this long before they are cancelled.
  double drain_timeout_s = 30;
  int64_t max_prompt_bytes = 32 << 20;
  // The prefix cache's block in tokens (its hash chain's unit and the shortest prefix reused);
  // 0 turns the cache off.
  int64_t prefix_block_tokens = 16;
  // A job whose prompt shares at least this many more tokens with a queued or running job than
  // with the cache waits for that job's KV (JobTable::EnablePrefixCache); 0: never.
  int64_t prefix_wait_tokens = 4096;
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
  StatusOr<std::vector<CacheEntryInfo>> ListCache() const override;
  Status PinCacheEntry(uint64_t id, bool pinned) override;
  Status DropCacheEntry(uint64_t id) override;

 private:
  using Clock = JobTable::Clock;
  using Deliveries = JobTable::Deliveries;

  Scheduler(std::unique_ptr<Tokenizer> tokenizer, std::unique_ptr<WorkerLink> link,
            ServiceMetrics* metrics, SchedulerOptions options, StepScheduler batch);

  // Submit without the catch-all around it.
  StatusOr<JobId> SubmitChecked(JobRequest request, std::shared_ptr<JobObserver> observer);
  // One pass of the loop; sets *busy when it did something. Caller holds no lock.
  Status Step(Deliveries* out, bool* busy);
  // Starts the drain once it was requested: new jobs are refused and the queued ones fail.
  void StartDrainLocked(Deliveries* out, bool* busy);
  // While draining: cancels the running jobs once `deadline` passed; returns whether the drain
  // is done (every job ended and the last step freed their KV).
  bool ContinueDrainLocked(Clock::time_point now, Clock::time_point deadline);
  // After the workers failed with `failure`: every job gets the error, nothing new is accepted.
  void FailService(const Status& failure);
  // Notes whether a worker has been silent past worker_suspect_s (logged when it starts and
  // ends). Caller holds mu_.
  void UpdateSuspectLocked();

  const std::unique_ptr<Tokenizer> tokenizer_;
  const std::unique_ptr<WorkerLink> link_;  // used by Run() only
  ServiceMetrics* const metrics_;
  const SchedulerOptions options_;
  const AdmissionLimits limits_;
  std::atomic<bool> drain_requested_{false};

  mutable std::mutex mu_;
  JobTable table_;    // guarded by mu_
  StepRunner steps_;  // guarded by mu_
  bool draining_ = false;
  bool failed_ = false;
  std::string failure_;
  // Why the service is unavailable while a worker is silent (empty: every worker beats), and
  // which worker (world rank) that is.
  std::string suspect_;
  int suspect_rank_ = 0;
};

}  // namespace millipede
