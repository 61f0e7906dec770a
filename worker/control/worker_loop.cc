#include "worker/control/worker_loop.h"

#include <iostream>
#include <thread>

#include "worker/generate.h"

namespace millipede {
namespace {

using Clock = std::chrono::steady_clock;
using control::JobEvent;
using control::JobEventKind;

JobEvent MakeEvent(JobEventKind kind, uint64_t job_id) {
  JobEvent e;
  e.kind = kind;
  e.job_id = job_id;
  return e;
}

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

WorkerLoop::WorkerLoop(Engine& engine, const CountingCommunicator* counting, int world_rank,
                       const WorkerLoopOptions& options)
    : engine_(engine),
      counting_(counting),
      world_rank_(world_rank),
      options_(options),
      channel_(MPI_COMM_WORLD),
      last_heard_(Clock::now()),
      last_stats_(Clock::now()) {}

Status WorkerLoop::SendHello() {
  control::WorkerHello hello;
  hello.rank = world_rank_;
  hello.vocab_size = engine_.config().vocab_size;
  hello.max_context = engine_.max_context();
  hello.kv_capacity_tokens = options_.kv_capacity_tokens;
  hello.eos_ids = engine_.config().eos_token_ids;
  hello.backend = BackendKindName(engine_.options().backend);
  hello.num_layers = engine_.config().num_hidden_layers;
  hello.num_kv_heads = engine_.config().num_key_value_heads;
  hello.capabilities = engine_.capabilities();
  return channel_.Send(control::kCoordinatorRank, control::kTagHello, control::Encode(hello));
}

Status WorkerLoop::CheckCoordinatorAlive() const {
  const double silent = SecondsSince(last_heard_);
  if (silent > options_.coordinator_timeout_s)
    return FailedPreconditionError("no message from the coordinator for " +
                                   std::to_string(static_cast<int>(silent)) + " s");
  return OkStatus();
}

Status WorkerLoop::MaybeSendStats(uint64_t running_job, double period_s, bool force) {
  if (!force && SecondsSince(last_stats_) < period_s) return OkStatus();
  last_stats_ = Clock::now();
  control::WorkerStats stats;
  stats.rank = world_rank_;
  const int64_t kv = engine_.KvBytes();
  // On a GPU the host tier (OmniKV's selected layers) is apart from the GPU's KV; on the CPU
  // backend all of it is host memory.
  if (engine_.options().backend == BackendKind::kCuda) {
    stats.kv_bytes_host = engine_.HostKvBytes();
    stats.kv_bytes_gpu = kv - stats.kv_bytes_host;
  } else {
    stats.kv_bytes_host = kv;
  }
  if (counting_ != nullptr) {
    stats.comm_s = counting_->counters().seconds;
    stats.comm_bytes = counting_->counters().bytes_sent;
  }
  // Attention time is measured by the engine with --profile only (it synchronises per phase).
  stats.attention_s = engine_.stats().attention_s;
  stats.jobs_run = jobs_run_;
  stats.running_job = running_job;
  return channel_.Send(control::kCoordinatorRank, control::kTagStats, control::Encode(stats));
}

Status WorkerLoop::SendEvent(const JobEvent& event) {
  return channel_.Send(control::kCoordinatorRank, control::kTagEvent, control::Encode(event));
}

Status WorkerLoop::PollDuringJob(uint64_t job_id) {
  MP_ASSIGN_OR_RETURN(auto age, channel_.Progress());
  (void)age;
  while (true) {
    MP_ASSIGN_OR_RETURN(std::optional<control::Message> m,
                        channel_.Poll(control::kCoordinatorRank, MPI_ANY_TAG));
    if (!m) break;
    last_heard_ = Clock::now();
    if (m->tag == control::kTagAbort) {
      return FailedPreconditionError("the coordinator is stopping after a failure");
    } else if (m->tag == control::kTagCancel) {
      control::JobCancel cancel;
      MP_RETURN_IF_ERROR(control::Decode(m->bytes, &cancel));
      if (cancel.job_id == job_id) cancel_ = true;
    } else if (m->tag != control::kTagPing) {
      // The coordinator sends nothing else while a job runs.
      return InternalError("unexpected control message (tag " + std::to_string(m->tag) +
                           ") during job " + std::to_string(job_id));
    }
  }
  // A coordinator that fell silent will never read the answer: stop the work.
  if (!CheckCoordinatorAlive().ok()) cancel_ = true;
  return OkStatus();
}

Status WorkerLoop::RunJob(const control::JobDescriptor& job) {
  GenerationRequest request;
  request.prompt_ids = job.prompt_ids;
  request.max_new_tokens = job.max_new_tokens;
  request.sampling = job.sampling;
  request.stop_ids = job.stop_ids;
  request.ignore_eos = job.ignore_eos;
  request.policy = job.policy;  // parsed and checked at admission
  cancel_ = false;
  Status control_error;  // a control-plane failure inside a callback ends the job and the loop
  Communicator& comm = engine_.comm();

  auto on_progress = [&](int64_t done, int64_t total) {
    if (!MaybeSendStats(job.job_id, 0.25).ok()) return false;
    if (!leader()) return true;
    Status s = PollDuringJob(job.job_id);
    if (s.ok()) {
      JobEvent e = MakeEvent(JobEventKind::kProgress, job.job_id);
      e.tokens_done = done;
      e.tokens_total = total;
      s = SendEvent(e);
    }
    if (!s.ok()) {
      control_error = s;
      return false;
    }
    return !cancel_;
  };
  auto on_token = [&](const SampledToken& token) {
    uint8_t stop = 0;
    if (leader()) {
      Status s = PollDuringJob(job.job_id);
      if (s.ok()) {
        JobEvent e = MakeEvent(JobEventKind::kToken, job.job_id);
        e.token = token.id;
        e.logprob = token.logprob;
        for (const TokenLogprob& t : token.top) {
          e.top_ids.push_back(t.id);
          e.top_logprobs.push_back(t.logprob);
        }
        s = SendEvent(e);
      }
      if (!s.ok()) control_error = s;
      stop = (cancel_ || !s.ok()) ? 1 : 0;
    }
    if (comm.size() > 1) {
      Status s = comm.HostBroadcast(&stop, sizeof(stop), 0);
      if (!s.ok()) {
        control_error = s;
        return false;
      }
    }
    if (!MaybeSendStats(job.job_id, 0.25).ok()) return false;
    return stop == 0;
  };

  StatusOr<GenerationResult> result = Generate(engine_, request, on_token, on_progress);
  ++jobs_run_;
  MP_RETURN_IF_ERROR(control_error);
  if (leader()) {
    JobEvent end = MakeEvent(JobEventKind::kDone, job.job_id);
    if (result.ok()) {
      end.finished_by_stop = result->finish_reason == FinishReason::kStop;
      end.ttft_s = result->ttft_s;
      end.decode_s = result->decode_s;
    } else {
      end.kind = JobEventKind::kFailed;
      end.status_code = static_cast<int32_t>(result.status().code());
      end.message = result.status().message();
    }
    MP_RETURN_IF_ERROR(SendEvent(end));
  } else if (!result.ok() && result.status().code() != StatusCode::kCancelled) {
    std::cerr << "millipede-worker rank " + std::to_string(world_rank_) + ": job " +
                     std::to_string(job.job_id) + ": " + result.status().ToString() + "\n";
  }
  // The sequence is freed: report the KV going back to zero at once.
  return MaybeSendStats(0, 0, /*force=*/true);
}

Status WorkerLoop::Run() {
  last_heard_ = Clock::now();
  MP_RETURN_IF_ERROR(MaybeSendStats(0, 0, /*force=*/true));
  while (true) {
    MP_ASSIGN_OR_RETURN(auto oldest, channel_.Progress());
    if (oldest.count() > options_.coordinator_timeout_s)
      return FailedPreconditionError("the coordinator stopped taking messages");
    MP_ASSIGN_OR_RETURN(std::optional<control::Message> m,
                        channel_.Poll(control::kCoordinatorRank, MPI_ANY_TAG));
    if (m) {
      last_heard_ = Clock::now();
      switch (m->tag) {
        case control::kTagJob: {
          control::JobDescriptor job;
          MP_RETURN_IF_ERROR(control::Decode(m->bytes, &job));
          MP_RETURN_IF_ERROR(RunJob(job));
          break;
        }
        case control::kTagShutdown:
          MP_RETURN_IF_ERROR(MaybeSendStats(0, 0, /*force=*/true));
          return channel_.Flush(std::chrono::seconds(5));
        case control::kTagAbort:
          return FailedPreconditionError("the coordinator is stopping after a failure");
        case control::kTagPing:
        case control::kTagCancel:  // for a job that already ended
          break;
        default:
          return InternalError("unexpected control message tag " + std::to_string(m->tag));
      }
      continue;
    }
    MP_RETURN_IF_ERROR(CheckCoordinatorAlive());
    MP_RETURN_IF_ERROR(MaybeSendStats(0, 0.5));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

}  // namespace millipede
