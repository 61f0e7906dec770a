#include "coordinator/scheduler.h"
#include "coordinator/scheduler_job.h"

#include <iostream>
#include <thread>

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

Scheduler::Scheduler(std::unique_ptr<Tokenizer> tokenizer, std::unique_ptr<WorkerLink> link,
                     ServiceMetrics* metrics, SchedulerOptions options)
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
              .capabilities = link_->facts().capabilities} {}

Scheduler::~Scheduler() = default;

StatusOr<JobId> Scheduler::Submit(JobRequest request, std::shared_ptr<JobObserver> observer) {
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

void Scheduler::Finish(Job& job, std::optional<Status> error, Deliveries* out) {
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
  if (running_ && running_->id == id) running_.reset();
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    if (*it == id) {
      queue_.erase(it);
      break;
    }
  }
  jobs_.erase(id);  // `job` may be gone from here on
}

void Scheduler::FailAll(const Status& error, Deliveries* out) {
  std::vector<std::shared_ptr<Job>> all;
  for (auto& [id, job] : jobs_) all.push_back(job);
  for (auto& job : all) {
    if (metrics_) metrics_->RequestError(job->state == JobState::kQueued ? "internal" : "worker");
    Finish(*job, error, out);
  }
}

Status Scheduler::HandleEvent(const control::JobEvent& e, Deliveries* out) {
  if (!running_ || running_->id != e.job_id) return OkStatus();  // an ended job's late event
  Job& job = *running_;
  std::shared_ptr<JobObserver> observer = job.observer;
  const bool ending = job.cancel_requested || job.stop_matched;
  switch (e.kind) {
    case control::JobEventKind::kProgress:
      job.prefill_done = e.tokens_done;
      if (ending) break;
      if (metrics_) metrics_->PrefillProgress(e.tokens_done, e.tokens_total);
      out->push_back(
          [observer, d = e.tokens_done, t = e.tokens_total] { observer->OnProgress(d, t); });
      break;
    case control::JobEventKind::kToken: {
      if (ending) break;
      const auto now = Clock::now();
      last_token_ = now;
      if (job.ids.empty()) {
        job.state = JobState::kDecode;
        job.first_token = now;
        job.prefill_done = static_cast<int64_t>(job.descriptor.prompt_ids.size());
        const double prefill_s = Seconds(now - job.started);
        if (metrics_)
          metrics_->FirstToken(Seconds(now - job.submitted),
                               prefill_s > 0 ? job.prefill_done / prefill_s : 0);
        if (metrics_) metrics_->OutputToken(0);
      } else if (metrics_) {
        metrics_->OutputToken(Seconds(now - job.last_token));
      }
      job.last_token = now;
      job.ids.push_back(e.token);
      SampledToken token{e.token, e.logprob, {}};
      for (size_t i = 0; i < e.top_ids.size(); ++i)
        token.top.push_back({e.top_ids[i], e.top_logprobs[i]});
      MP_ASSIGN_OR_RETURN(TextStream::Piece piece, job.text->Push(e.token));
      if (job.held_token) {
        auto [held, delta] = *job.held_token;
        out->push_back([observer, held, delta] { observer->OnToken(held, delta); });
        job.held_token.reset();
      }
      if (piece.open) {
        job.held_token.emplace(std::move(token), std::move(piece.delta));
      } else {
        out->push_back([observer, token = std::move(token), d = std::move(piece.delta)] {
          observer->OnToken(token, d);
        });
      }
      if (piece.stopped) {
        job.stop_matched = true;
        if (!job.cancel_sent) {
          job.cancel_sent = true;
          MP_RETURN_IF_ERROR(link_->CancelJob(job.id));
        }
      }
      break;
    }
    case control::JobEventKind::kDone:
      job.stopped_by_id = e.finished_by_stop;
      if (job.cancel_requested && !job.stop_matched) {
        // The job ended on its own just as the cancel went out: it still counts as cancelled.
        Finish(job, CancelledError("job " + std::to_string(job.id) + " was cancelled"), out);
      } else {
        Finish(job, std::nullopt, out);
      }
      break;
    case control::JobEventKind::kFailed: {
      const auto code = static_cast<StatusCode>(e.status_code);
      if (code == StatusCode::kCancelled && job.stop_matched) {
        Finish(job, std::nullopt, out);
      } else if (code == StatusCode::kCancelled) {
        Finish(job, CancelledError("job " + std::to_string(job.id) + " was cancelled"), out);
      } else {
        if (metrics_) metrics_->RequestError("worker");
        Finish(job, Status(code, "the workers failed the job: " + e.message), out);
      }
      break;
    }
  }
  return OkStatus();
}

Status Scheduler::HandleMessage(const control::Message& m, Deliveries* out) {
  if (m.tag == control::kTagEvent) {
    control::JobEvent e;
    MP_RETURN_IF_ERROR(control::Decode(m.bytes, &e));
    MP_ASSERT(m.source == control::kLeaderRank, "job event from rank ", m.source);
    return HandleEvent(e, out);
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
  if (drain_requested_.load() && !draining_) {
    draining_ = true;
    *busy = true;
    std::vector<std::shared_ptr<Job>> waiting;
    for (JobId id : queue_) waiting.push_back(jobs_[id]);
    for (auto& job : waiting)
      Finish(*job, FailedPreconditionError("the service is shutting down"), out);
  }
  // Cancels: a queued job ends here; the running one once the workers stopped it.
  std::vector<std::shared_ptr<Job>> cancelled;
  for (JobId id : queue_)
    if (jobs_[id]->cancel_requested) cancelled.push_back(jobs_[id]);
  for (auto& job : cancelled)
    Finish(*job, CancelledError("job " + std::to_string(job->id) + " was cancelled"), out);
  if (running_ && running_->cancel_requested && !running_->cancel_sent) {
    running_->cancel_sent = true;
    *busy = true;
    MP_RETURN_IF_ERROR(link_->CancelJob(running_->id));
  }
  if (!running_ && !queue_.empty() && !draining_) {
    running_ = jobs_[queue_.front()];
    queue_.pop_front();
    running_->state = JobState::kPrefill;
    running_->started = Clock::now();
    if (metrics_) metrics_->JobStarted(Seconds(running_->started - running_->submitted));
    *busy = true;
    MP_RETURN_IF_ERROR(link_->StartJob(running_->descriptor));
  }
  return OkStatus();
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
        if (running_ && now > *drain_deadline && !running_->cancel_requested) {
          std::cerr << "millipede-coordinator: drain deadline passed: cancelling job " +
                           std::to_string(running_->id) + "\n";
          running_->cancel_requested = true;
        }
        drained = !running_ && queue_.empty();
      }
    }
    if (drained) return link_->Shutdown(options_.worker_timeout_s);
    if (!busy) std::this_thread::sleep_for(std::chrono::microseconds(500));
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
