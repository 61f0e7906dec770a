// The scheduler's job table: the queued and running jobs, the queue's order, the final status of
// the recently ended jobs, and the batching policy (StepScheduler), kept in step with the table
// as jobs are added and end. Ending a job builds the events its observer gets.
//
// Not thread-safe: the Scheduler calls it under its lock.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "api/job_service.h"
#include "control/messages.h"
#include "coordinator/step_scheduler.h"
#include "coordinator/text_stream.h"
#include "monitoring/service_metrics.h"

namespace millipede {

class JobTable {
 public:
  using Clock = std::chrono::steady_clock;
  // Job events for the observers, delivered in order once the scheduler's lock is released.
  using Deliveries = std::vector<std::function<void()>>;

  struct Job {
    JobId id = 0;
    control::JobDescriptor descriptor;
    std::shared_ptr<JobObserver> observer;
    std::unique_ptr<TextStream> text;
    JobState state = JobState::kQueued;
    Clock::time_point submitted, started, first_token, last_token;
    int64_t prefill_done = 0;
    // The prefill attention's query-key pairs and the causal pairs (StepJobResult), as of its
    // last chunk.
    int64_t prefill_attended_pairs = 0, prefill_causal_pairs = 0;
    std::vector<int32_t> ids;
    // A token whose text is still open (UTF-8 or stop-string prefix) is delivered with the next
    // event, so that the last one can carry the held-back text.
    std::optional<std::pair<SampledToken, std::string>> held_token;
    bool cancel_requested = false;  // by the client or the drain deadline
    bool stop_matched = false;      // a stop string ended the text; the next plan frees it
    bool stopped_by_id = false;     // the workers ended it at a stop or EOS id
  };

  // `metrics` may be null; it must outlive the table.
  JobTable(StepScheduler batch, ServiceMetrics* metrics)
      : batch_(std::move(batch)), metrics_(metrics) {}

  // The batching policy: the step runner plans from it.
  StepScheduler& batch() { return batch_; }
  const StepScheduler& batch() const { return batch_; }

  // Queues `job` (its descriptor filled but for the id, which is assigned here) once the batching
  // policy took it with `kv_cost_per_rank`; its error otherwise.
  StatusOr<JobId> Add(std::shared_ptr<Job> job, int64_t kv_cost_per_rank);
  // The queued and running jobs by id.
  const std::map<JobId, std::shared_ptr<Job>>& jobs() const { return jobs_; }
  // The queued or running job `id`, or null.
  std::shared_ptr<Job> Find(JobId id) const;
  size_t num_queued() const { return queue_.size(); }

  // Marks job `id` for cancelling (the step runner ends it). A job that has already ended
  // (finished, failed or cancelled) is left as it is: Ok, a no-op. NotFound only for an id never
  // issued.
  Status RequestCancel(JobId id);
  // A queued or running job's status, or an ended one's final status (kept for the last
  // kEndedKept ended jobs; NotFound, saying so, for an older one).
  StatusOr<JobStatusInfo> GetStatus(JobId id) const;
  // Whether `id` was given to a job (ids are issued in order from 1).
  bool WasIssued(JobId id) const { return id >= 1 && id < next_id_; }
  // How many ended jobs' final status is kept.
  static constexpr size_t kEndedKept = 1024;

  // A job the plan starts: out of the queue, into prefill, at `now`.
  void Start(Job& job, Clock::time_point now);
  // A job the workers could not start beside the running ones: back to the front of the queue
  // if the batching policy takes it back (true), else false.
  bool Requeue(Job& job);
  // Ends a job (removing it from the table and the batching policy) with a completion or
  // error. `freed_by_workers`: the workers freed its sequence themselves (a finished or failed
  // job); otherwise the next step frees it.
  void Finish(Job& job, std::optional<Status> error, Deliveries* out, bool freed_by_workers);
  // Fails every job with `error` (worker failure).
  void FailAll(const Status& error, Deliveries* out);
  // Fails the queued jobs with `error` (a drain).
  void FailQueued(const Status& error, Deliveries* out);
  // prefill_progress_ratio: the longest prompt in prefill.
  void ReportPrefillProgress();

 private:
  JobStatusInfo StatusOf(const Job& job) const;
  // The observer's last events for an ended job; returns the finish reason for the metrics.
  const char* DeliverError(Job& job, const Status& error, JobStatusInfo* info,
                           Deliveries* out) const;
  const char* DeliverCompletion(Job& job, double e2e_s, double decode_tps, Deliveries* out) const;
  // Keeps the final status of the last kEndedKept ended jobs.
  void RememberEnded(const JobStatusInfo& info);
  void RemoveFromQueue(JobId id);

  StepScheduler batch_;
  ServiceMetrics* const metrics_;
  JobId next_id_ = 1;
  std::map<JobId, std::shared_ptr<Job>> jobs_;  // queued and running
  std::deque<JobId> queue_;                     // the queued ones, oldest first
  std::map<JobId, JobStatusInfo> ended_;        // the last kEndedKept ended jobs
  std::deque<JobId> ended_order_;
};

}  // namespace millipede
