// The coordinator's side of the engine steps: between steps it ends cancelled jobs and plans the
// next step from the batching policy and sends it to the workers; during a step it stops a step
// that prefills a cancelled job and fails a stalled one; and it takes what the workers report
// (a step's results, prefill progress, stats) to the jobs.
//
// Not thread-safe: the Scheduler calls it under its lock, from the control loop.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "api/job_service.h"
#include "control/messages.h"
#include "coordinator/job_table.h"
#include "coordinator/step_scheduler.h"
#include "coordinator/step_time_model.h"
#include "coordinator/worker_link.h"
#include "monitoring/service_metrics.h"

namespace millipede {

struct StepRunnerOptions {
  // A step's token budget, sent with each job the step starts.
  int64_t max_step_tokens = 2048;
  // A step that shows no progress for this long is stalled (SchedulerOptions::stall_timeout_s).
  double stall_timeout_s = 600;
  // A stalled step that has not returned this long after its cancel ends the service.
  double stall_abort_s = 600;
  // Inter-token latency target (seconds; 0: none): while jobs decode, each step's prefill work is
  // bounded so that steps with decode tokens take about this long (PrefillWorkController), below
  // max_prefill_work (0: none).
  double itl_target_s = 0;
  int64_t max_prefill_work = 0;
};

class StepRunner {
 public:
  using Clock = JobTable::Clock;
  using Deliveries = JobTable::Deliveries;

  // `link`, `table` and `metrics` (may be null) must outlive the runner.
  StepRunner(WorkerLink* link, JobTable* table, ServiceMetrics* metrics, StepRunnerOptions options);

  // Whether a step is in flight on the workers.
  bool stepping() const { return in_flight_.has_value(); }
  // When the last token of any job arrived.
  std::optional<Clock::time_point> last_token() const { return last_token_; }
  // The latest stats each worker reported.
  std::vector<RankStats> rank_stats() const;

  // Between steps, ends the cancelled jobs and plans and sends the next step; during one, fails
  // it if it stalled and stops it inside if it prefills a cancelled job. Sets *busy when it did
  // something. DeviceError when a stalled step did not return after its cancel.
  Status Advance(Deliveries* out, bool* busy);
  // A message from a worker: a heartbeat, a step's results, a job's prefill progress, stats.
  Status HandleMessage(const control::Message& m, Deliveries* out);

 private:
  using Job = JobTable::Job;
  // The step the workers are running.
  struct InFlight {
    uint64_t step_id = 0;
    PlannedStep planned;
    std::vector<JobId> cancel_sent;  // jobs whose cancel went to the leader during the step
    bool stalled = false;
    Clock::time_point stalled_at;  // when its jobs were failed as stalled
    Clock::time_point sent_at;
  };
  // A step that ran: observed by the step time model when it only computed, and reported to the
  // metrics when it decoded tokens.
  void TimeStep(const PlannedStep& planned, double seconds);

  // Between steps (step_runner.cc).
  // Ends cancelled jobs and jobs a stop string ended.
  void EndCancelled(Deliveries* out);
  // Plans the next step and sends it (nothing when there is nothing to do).
  Status SendNextStep(bool* busy);
  // The step's decode tokens per decode strategy, to the metrics.
  void ReportDecodeBatches(const PlannedStep& planned);
  // During a step: a step in flight that prefills a cancelled job is stopped inside.
  Status CancelInsideStep(bool* busy);
  // Asks the leader to stop the step in flight, which prefills `job` (once per job and step).
  Status SendCancel(JobId job, bool* busy);
  // Fails the jobs of a step without progress for stall_timeout_s (once per step). A stalled
  // step that has not returned stall_abort_s later is an error: the service cannot go on.
  Status DetectStall(Deliveries* out);

  // What the workers report (step_results.cc).
  void HandleProgress(const control::JobProgress& p, Deliveries* out);
  void HandleStats(int rank, const control::WorkerStats& w);
  Status HandleStepDone(const control::StepDone& done, Deliveries* out);
  // One job's result in a step that ran `planned`.
  void HandleResult(Job& job, const control::StepJobResult& r, const PlannedStep& planned,
                    Deliveries* out);
  void HandleToken(Job& job, const control::StepJobResult& r, Deliveries* out);
  void HandleJobFailed(Job& job, const control::StepJobResult& r, bool started_here,
                       Deliveries* out);

  WorkerLink& link_;
  JobTable& table_;
  ServiceMetrics* const metrics_;
  const StepRunnerOptions options_;
  std::optional<InFlight> in_flight_;
  Clock::time_point last_progress_;  // the step in flight last showed progress
  uint64_t next_step_id_ = 1;
  int64_t kv_waits_reported_ = 0;  // StepScheduler::jobs_waited_for_kv as sent to the metrics
  std::optional<Clock::time_point> last_token_;
  std::map<int, RankStats> rank_stats_;
  StepTimeModel step_time_;
  PrefillWorkController work_control_;
};

}  // namespace millipede
