#include "coordinator/scheduler.h"

#include <iostream>
#include <thread>

#include "coordinator/scheduler_job.h"

namespace millipede {
namespace {

constexpr size_t kEndedKept = 1024;
constexpr double kPingPeriodS = 1.0;

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// The request_errors_total reason of a refused submission.
const char* RejectReason(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOutOfRange:
      return "too_long";
    case StatusCode::kResourceExhausted:
      return "queue_full";
    case StatusCode::kFailedPrecondition:
      return "draining";
    case StatusCode::kUnimplemented:
      return "unsupported";
    default:
      return "invalid";
  }
}

}  // namespace

StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(std::unique_ptr<Tokenizer> tokenizer,
                                                       std::unique_ptr<WorkerLink> link,
                                                       ServiceMetrics* metrics,
                                                       SchedulerOptions options) {
  const WorkerFacts& facts = link->facts();
  MP_ASSIGN_OR_RETURN(StepScheduler batch,
                      StepScheduler::Create({.num_ranks = facts.num_workers,
                                             .max_step_tokens = options.max_step_tokens,
                                             .max_running = options.max_running,
                                             .kv_positions_per_rank =
                                                 std::max<int64_t>(facts.kv_capacity_per_rank, 1),
                                             .max_prefill_work = options.max_prefill_work,
                                             .min_chunk = options.min_chunk,
                                             .ring_pairs_per_row = options.ring_pairs_per_row}));
  return std::unique_ptr<Scheduler>(new Scheduler(std::move(tokenizer), std::move(link), metrics,
                                                  std::move(options), std::move(batch)));
}

Scheduler::Scheduler(std::unique_ptr<Tokenizer> tokenizer, std::unique_ptr<WorkerLink> link,
                     ServiceMetrics* metrics, SchedulerOptions options, StepScheduler batch)
    : tokenizer_(std::move(tokenizer)),
      link_(std::move(link)),
      metrics_(metrics),
      options_(std::move(options)),
      limits_{.vocab_size = link_->facts().vocab_size,
              .context_limit = link_->facts().max_context,
              .kv_capacity_per_rank = link_->facts().kv_capacity_per_rank,
              .num_workers = link_->facts().num_workers,
              .max_prompt_bytes = options_.max_prompt_bytes,
              .num_layers = link_->facts().num_layers,
              .num_kv_heads = link_->facts().num_kv_heads,
              .capabilities = link_->facts().capabilities,
              .max_step_tokens = options_.max_step_tokens},
      batch_(std::move(batch)) {}

Scheduler::~Scheduler() = default;

StatusOr<JobId> Scheduler::Submit(JobRequest request, std::shared_ptr<JobObserver> observer) {
  // No request may end the process: an unexpected exception fails this submission only.
  try {
    return SubmitChecked(std::move(request), std::move(observer));
  } catch (const std::exception& e) {
    std::cerr << "millipede-coordinator: internal error while admitting a job: " +
                     std::string(e.what()) + "\n";
    if (metrics_) metrics_->RequestError("internal");
    return InternalError(std::string("internal error while admitting the job: ") + e.what());
  }
}

StatusOr<JobId> Scheduler::SubmitChecked(JobRequest request,
                                         std::shared_ptr<JobObserver> observer) {
  auto reject = [&](Status s) -> StatusOr<JobId> {
    if (metrics_) metrics_->RequestError(RejectReason(s));
    return s;
  };
  if (observer == nullptr) return reject(InvalidArgumentError("no observer for the job"));
  // Tokenizing may take a while for long prompts: no lock held.
  StatusOr<AdmittedJob> admitted = AdmitRequest(request, *tokenizer_, limits_);
  if (!admitted.ok()) return reject(admitted.status());

  auto job = std::make_shared<Job>();
  job->observer = std::move(observer);
  job->text = std::make_unique<TextStream>(*tokenizer_, request.stop_strings);
  job->submitted = Clock::now();
  control::JobDescriptor& d = job->descriptor;
  d.prompt_ids = std::move(admitted->prompt_ids);
  d.max_new_tokens = admitted->max_new_tokens;
  d.sampling = std::move(request.sampling);
  d.stop_ids = request.stop_ids;
  d.ignore_eos = request.ignore_eos;
  d.policy = std::move(admitted->policy);

  std::lock_guard<std::mutex> lock(mu_);
  if (failed_) return reject(FailedPreconditionError("the service has failed: " + failure_));
  if (draining_ || drain_requested_.load())
    return reject(FailedPreconditionError("the service is shutting down"));
  if (queue_.size() >= options_.max_queue)
    return reject(ResourceExhaustedError("queue full: " + std::to_string(queue_.size()) +
                                         " jobs are waiting (the limit is " +
                                         std::to_string(options_.max_queue) + ")"));
  // Admission already held the job to one rank's KV capacity: the policy takes it.
  Status added = batch_.Add(next_id_, static_cast<int64_t>(d.prompt_ids.size()), d.max_new_tokens,
                            admitted->kv_cost_per_rank);
  if (!added.ok()) return reject(added);
  job->id = next_id_++;
  d.job_id = job->id;
  jobs_[job->id] = job;
  queue_.push_back(job->id);
  if (metrics_) metrics_->JobQueued();
  return job->id;
}

void Scheduler::CountRefusal(std::string_view reason) {
  if (metrics_) metrics_->RequestError(reason);
}

Status Scheduler::Cancel(JobId id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) {
    if (ended_.count(id)) return NotFoundError("job " + std::to_string(id) + " already ended");
    return NotFoundError("no job " + std::to_string(id));
  }
  it->second->cancel_requested = true;
  return OkStatus();
}

void Scheduler::Finish(Job& job, std::optional<Status> error, Deliveries* out,
                       bool freed_by_workers) {
  const auto now = Clock::now();
  const bool started = job.state != JobState::kQueued;
  const double e2e = Seconds(now - job.submitted);
  std::shared_ptr<JobObserver> observer = job.observer;
  JobStatusInfo info = StatusOf(job);
  info.queue_position = 0;
  double decode_tps = 0;
  if (job.ids.size() > 1 && job.last_token > job.first_token)
    decode_tps =
        static_cast<double>(job.ids.size() - 1) / Seconds(job.last_token - job.first_token);
  const char* reason = "error";
  if (error) {
    if (error->code() == StatusCode::kCancelled) {
      info.state = JobState::kCancelled;
      reason = "cancelled";
    } else {
      info.state = JobState::kFailed;
      info.error = error->ToString();
    }
    if (job.held_token) {
      auto [token, delta] = *job.held_token;
      out->push_back([observer, token, delta] { observer->OnToken(token, delta); });
    }
    out->push_back([observer, e = *error] { observer->OnError(e); });
  } else {
    info.state = JobState::kFinished;
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
    c.e2e_s = e2e;
    const double prefill_s = Seconds(job.first_token - job.started);
    c.prefill_tokens_per_s = prefill_s > 0 ? c.prompt_tokens / prefill_s : 0;
    c.decode_tokens_per_s = decode_tps;
    c.prefill_attended_pairs = job.prefill_attended_pairs;
    c.prefill_causal_pairs = job.prefill_causal_pairs;
    reason = c.finish_reason == "stop" ? "stop" : "length";
    out->push_back([observer, c] { observer->OnComplete(c); });
  }
  job.held_token.reset();
  if (metrics_) metrics_->JobFinished(reason, started, e2e, decode_tps);
  ended_[job.id] = info;
  ended_order_.push_back(job.id);
  while (ended_order_.size() > kEndedKept) {
    ended_.erase(ended_order_.front());
    ended_order_.pop_front();
  }
  const JobId id = job.id;
  batch_.Remove(id, freed_by_workers);
  if (metrics_) metrics_->KvReserved(batch_.reserved_per_rank());
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    if (*it == id) {
      queue_.erase(it);
      break;
    }
  }
  jobs_.erase(id);                             // `job` may be gone from here on
  if (started) ReportPrefillProgressLocked();  // 0 once no prompt is in prefill
}

void Scheduler::FailAll(const Status& error, Deliveries* out) {
  std::vector<std::shared_ptr<Job>> all;
  for (auto& [id, job] : jobs_) all.push_back(job);
  for (auto& job : all) {
    if (metrics_) metrics_->RequestError(job->state == JobState::kQueued ? "internal" : "worker");
    Finish(*job, error, out, /*freed_by_workers=*/true);
  }
}

Status Scheduler::HandleMessage(const control::Message& m, Deliveries* out) {
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
    auto it = jobs_.find(p.job_id);
    if (it == jobs_.end() || it->second->cancel_requested || it->second->stop_matched)
      return OkStatus();
    last_progress_ = Clock::now();
    it->second->prefill_done = p.tokens_done;
    ReportPrefillProgressLocked();
    std::shared_ptr<JobObserver> observer = it->second->observer;
    out->push_back(
        [observer, d = p.tokens_done, t = p.tokens_total] { observer->OnProgress(d, t); });
    return OkStatus();
  }
  if (m.tag == control::kTagStats) {
    control::WorkerStats w;
    MP_RETURN_IF_ERROR(control::Decode(m.bytes, &w));
    RankStats r{.rank = m.source,
                .kv_bytes_gpu = w.kv_bytes_gpu,
                .kv_bytes_host = w.kv_bytes_host,
                .attention_s = w.attention_s,
                .comm_s = w.comm_s,
                .comm_bytes = w.comm_bytes};
    rank_stats_[m.source] = r;
    if (metrics_) metrics_->UpdateRank(r);
    return OkStatus();
  }
  return InternalError("unexpected control message (tag " + std::to_string(m.tag) + ") from rank " +
                       std::to_string(m.source));
}

Status Scheduler::Step(Deliveries* out, bool* busy) {
  // Messages first: a worker's report may be waiting behind others.
  for (int i = 0; i < 256; ++i) {
    MP_ASSIGN_OR_RETURN(std::optional<control::Message> m, link_->Poll());
    if (!m) break;
    *busy = true;
    std::lock_guard<std::mutex> lock(mu_);
    MP_RETURN_IF_ERROR(HandleMessage(*m, out));
  }
  MP_RETURN_IF_ERROR(link_->CheckAlive(options_.worker_timeout_s));

  std::lock_guard<std::mutex> lock(mu_);
  return PlanLocked(out, busy);
}

Status Scheduler::Run() {
  auto last_ping = Clock::now() - std::chrono::seconds(10);
  std::optional<Clock::time_point> drain_deadline;
  Status failure;
  while (true) {
    Deliveries out;
    bool busy = false;
    failure = Step(&out, &busy);
    for (auto& deliver : out) deliver();
    if (!failure.ok()) break;
    const auto now = Clock::now();
    if (Seconds(now - last_ping) >= kPingPeriodS) {
      failure = link_->Ping();
      if (!failure.ok()) break;
      last_ping = now;
    }
    bool drained = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (draining_) {
        if (!drain_deadline)
          drain_deadline = now + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(options_.drain_timeout_s));
        if (now > *drain_deadline) {
          for (auto& [id, job] : jobs_) {
            if (job->cancel_requested) continue;
            std::cerr << "millipede-coordinator: drain deadline passed: cancelling job " +
                             std::to_string(id) + "\n";
            job->cancel_requested = true;
          }
        }
        // Done once every job ended and the last step freed their KV.
        drained = jobs_.empty() && !in_flight_ && batch_.running() == 0;
      }
    }
    if (drained) return link_->Shutdown(options_.worker_timeout_s);
    if (!busy) {
      bool stepping = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        stepping = in_flight_.has_value();
      }
      // A step's result is awaited closely: the next step waits on it.
      std::this_thread::sleep_for(stepping ? std::chrono::microseconds(20)
                                           : std::chrono::microseconds(500));
    }
  }
  // The workers can no longer be trusted: every job gets the error, nothing new is accepted.
  Deliveries out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    failed_ = true;
    failure_ = failure.ToString();
    FailAll(DeviceError("the workers failed: " + failure.message()), &out);
  }
  for (auto& deliver : out) deliver();
  return failure;
}

}  // namespace millipede
