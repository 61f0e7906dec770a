// Scheduler: creating it, admitting and cancelling jobs, and the control loop with the drain.
#include "coordinator/scheduler.h"

#include <cstdio>
#include <iostream>
#include <thread>

namespace millipede {
namespace {

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
  std::unique_ptr<Scheduler> scheduler(new Scheduler(std::move(tokenizer), std::move(link),
                                                     metrics, std::move(options),
                                                     std::move(batch)));
  if (scheduler->options_.prefix_block_tokens > 0) {
    // Within one run the model is fixed; the key tells its weights, shape and KV format apart
    // anyway, so that the disk tier's entries of other weights are never used after a restart.
    const std::string model_key = "model " + scheduler->options_.model_id + " weights " +
                                  facts.weights_fingerprint + " vocab " +
                                  std::to_string(facts.vocab_size) + " layers " +
                                  std::to_string(facts.num_layers) + " kv " + facts.kv_dtype;
    MP_ASSIGN_OR_RETURN(PrefixCache cache,
                        PrefixCache::Create(scheduler->options_.prefix_block_tokens,
                                            facts.num_workers, model_key));
    cache.SetHostTier(facts.cache_host_bytes, facts.kv_position_bytes);
    cache.SetDiskTier(facts.cache_disk_bytes);
    cache.SetShareUnit(facts.kv_share_unit_rows);
    scheduler->table_.EnablePrefixCache(std::move(cache), facts.default_policy,
                                        facts.selected_kv_host,
                                        scheduler->options_.prefix_wait_tokens);
    const int64_t adopted = scheduler->table_.AdoptDiskEntries(facts.disk_entries);
    if (adopted > 0)
      std::cerr << "millipede-coordinator: " << adopted
                << " prefix-cache entries found on the workers' disks\n";
  }
  return scheduler;
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
              .max_step_tokens = options_.max_step_tokens,
              .default_policy = link_->facts().default_policy,
              .selected_kv_host = link_->facts().selected_kv_host},
      table_(std::move(batch), metrics),
      steps_(link_.get(), &table_, metrics,
             {.max_step_tokens = options_.max_step_tokens,
              .stall_timeout_s = options_.stall_timeout_s,
              .stall_abort_s = options_.stall_abort_s,
              .itl_target_s = options_.itl_target_s,
              .max_prefill_work = options_.max_prefill_work}) {}

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

  auto job = std::make_shared<JobTable::Job>();
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
  job->decode_strategy = DecodeStrategyName(d.policy ? *d.policy : link_->facts().default_policy);
  job->use_cache = request.cache;
  job->pin = request.pin;

  std::lock_guard<std::mutex> lock(mu_);
  if (failed_) return reject(FailedPreconditionError("the service has failed: " + failure_));
  if (!suspect_.empty()) {
    if (metrics_) metrics_->RequestError("unavailable");
    return FailedPreconditionError("the service is unavailable: " + suspect_ + "; retry later");
  }
  if (draining_ || drain_requested_.load())
    return reject(FailedPreconditionError("the service is shutting down"));
  if (table_.num_queued() >= options_.max_queue)
    return reject(ResourceExhaustedError("queue full: " + std::to_string(table_.num_queued()) +
                                         " jobs are waiting (the limit is " +
                                         std::to_string(options_.max_queue) + ")"));
  StatusOr<JobId> id = table_.Add(std::move(job), admitted->kv_cost_per_rank);
  if (!id.ok()) return reject(id.status());
  return id;
}

void Scheduler::CountRefusal(std::string_view reason) {
  if (metrics_) metrics_->RequestError(reason);
}

Status Scheduler::Cancel(JobId id) {
  std::lock_guard<std::mutex> lock(mu_);
  return table_.RequestCancel(id);
}

Status Scheduler::Step(Deliveries* out, bool* busy) {
  // Messages first: a worker's report may be waiting behind others.
  for (int i = 0; i < 256; ++i) {
    MP_ASSIGN_OR_RETURN(std::optional<control::Message> m, link_->Poll());
    if (!m) break;
    *busy = true;
    std::lock_guard<std::mutex> lock(mu_);
    MP_RETURN_IF_ERROR(steps_.HandleMessage(*m, out));
  }
  MP_RETURN_IF_ERROR(link_->CheckAlive(options_.worker_timeout_s));

  std::lock_guard<std::mutex> lock(mu_);
  UpdateSuspectLocked();
  StartDrainLocked(out, busy);
  return steps_.Advance(out, busy);
}

void Scheduler::UpdateSuspectLocked() {
  const WorkerLink::Silence silence = link_->LongestSilence();
  if (silence.seconds < options_.worker_suspect_s) {
    if (!suspect_.empty())
      std::cerr << "millipede-coordinator: worker rank " + std::to_string(suspect_rank_) +
                       " answers again: accepting jobs\n";
    suspect_.clear();
    return;
  }
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%.1f", silence.seconds);
  const std::string why = "worker rank " + std::to_string(silence.rank) + " has been silent for " +
                          seconds + " s";
  if (suspect_.empty())
    std::cerr << "millipede-coordinator: " + why +
                     " (--worker-suspect-s): not ready, refusing new jobs until it answers\n";
  suspect_ = why;
  suspect_rank_ = silence.rank;
}

void Scheduler::StartDrainLocked(Deliveries* out, bool* busy) {
  if (!drain_requested_.load() || draining_) return;
  draining_ = true;
  *busy = true;
  table_.FailQueued(FailedPreconditionError("the service is shutting down"), out);
}

bool Scheduler::ContinueDrainLocked(Clock::time_point now, Clock::time_point deadline) {
  if (now > deadline) {
    for (const auto& [id, job] : table_.jobs()) {
      if (job->cancel_requested) continue;
      std::cerr << "millipede-coordinator: drain deadline passed: cancelling job " +
                       std::to_string(id) + "\n";
      job->cancel_requested = true;
    }
  }
  // Done once every job ended and the last step freed their KV.
  return table_.jobs().empty() && !steps_.stepping() && table_.batch().running() == 0;
}

void Scheduler::FailService(const Status& failure) {
  Deliveries out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    failed_ = true;
    failure_ = failure.ToString();
    // Retryable: the job did not finish, and a supervisor brings the service back.
    table_.FailAll(FailedPreconditionError("the job did not finish: the workers failed (" +
                                               failure.message() +
                                               "); the service is stopping, retry later"),
                   &out);
  }
  for (auto& deliver : out) deliver();
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
        drained = ContinueDrainLocked(now, *drain_deadline);
      }
    }
    if (drained) return link_->Shutdown(options_.worker_timeout_s);
    if (!busy) {
      bool stepping = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        stepping = steps_.stepping();
      }
      // A step's result is awaited closely: the next step waits on it.
      std::this_thread::sleep_for(stepping ? std::chrono::microseconds(20)
                                           : std::chrono::microseconds(500));
    }
  }
  // The workers can no longer be trusted: every job gets the error, nothing new is accepted.
  FailService(failure);
  return failure;
}

}  // namespace millipede
