#include "worker/control/worker_loop.h"

#include <iostream>
#include <thread>

#include "common/kv_share.h"

namespace millipede {
namespace {

using Clock = std::chrono::steady_clock;
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
      runner_(engine),
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
  hello.default_policy = engine_.policy();
  hello.kv_dtype = DTypeName(engine_.options().kv_dtype);
  const SelectedKvTier tier = engine_.options().selected_kv;
  hello.selected_kv_host = tier == SelectedKvTier::kHost ||
                           (tier == SelectedKvTier::kAuto &&
                            engine_.backend().kind() != BackendKind::kCpu);
  hello.cache_host_bytes = options_.cache_host_bytes;
  hello.weights_fingerprint = WeightsFingerprint(engine_.options());
  if (const DiskTier* disk = engine_.disk_tier()) {
    hello.cache_disk_bytes = options_.cache_disk_bytes;
    for (const SavedSequenceFileInfo& e : disk->Entries()) {
      control::CacheEntryFacts facts{.entry = e.meta.id, .key = e.meta.key,
                                     .model_key = e.meta.model_key, .tokens = e.meta.tokens,
                                     .every_length = e.meta.every_length,
                                     .lengths = e.meta.lengths, .length = e.length,
                                     .stored = {}};
      for (const TokenRange& r : e.stored) facts.stored.insert(facts.stored.end(), {r.begin, r.end});
      hello.disk_entries.push_back(std::move(facts));
    }
  }
  const ModelConfig& config = engine_.config();
  hello.kv_position_bytes = 2 * config.num_hidden_layers * config.num_key_value_heads *
                            config.head_dim *
                            static_cast<int64_t>(DTypeSize(engine_.options().kv_dtype));
  hello.kv_share_unit_rows = KvShareUnitRows(
      engine_.backend().page_bytes(),
      config.head_dim * static_cast<int64_t>(DTypeSize(engine_.options().kv_dtype)));
  return channel_.Send(control::kCoordinatorRank, control::kTagHello, control::Encode(hello));
}

Status WorkerLoop::CheckCoordinatorAlive() const {
  const double silent = SecondsSince(last_heard_);
  if (silent > options_.coordinator_timeout_s)
    return FailedPreconditionError("no message from the coordinator for " +
                                   std::to_string(static_cast<int>(silent)) + " s");
  return OkStatus();
}

Status WorkerLoop::MaybeSendStats(double period_s, bool force) {
  if (!force && SecondsSince(last_stats_) < period_s) return OkStatus();
  last_stats_ = Clock::now();
  control::WorkerStats stats;
  stats.rank = world_rank_;
  // A cache entry's blocks that running jobs map count once, in the cache's bytes.
  const int64_t kv = engine_.KvBytes() - engine_.SharedKvBytes();
  // On a GPU the host tier (OmniKV's selected layers) is apart from the GPU's KV; on the CPU
  // backend all of it is host memory.
  const int64_t cached = engine_.CachedKvBytes();
  if (engine_.options().backend == BackendKind::kCuda) {
    stats.kv_bytes_host = engine_.HostKvBytes();
    stats.kv_bytes_gpu = kv - stats.kv_bytes_host;
    stats.cache_bytes_host = engine_.CachedHostKvBytes();
    stats.cache_bytes_gpu = cached - stats.cache_bytes_host;
  } else {
    stats.kv_bytes_host = kv;
    stats.cache_bytes_host = cached;
  }
  stats.cache_bytes_disk = engine_.CachedDiskBytes();
  const SequenceTable::CacheSeconds moved = engine_.cache_seconds();
  stats.cache_save_s = moved.save;
  stats.cache_write_s = moved.write;
  stats.cache_load_s = moved.load;
  if (counting_ != nullptr) {
    stats.comm_s = counting_->counters().seconds;
    stats.comm_bytes = counting_->counters().bytes_sent;
  }
  // Attention time is measured by the engine with --profile only (it synchronises per phase).
  stats.attention_s = engine_.stats().attention_s;
  stats.steps_run = steps_run_;
  stats.running_jobs = runner_.running();
  stats.promoted = promoted_;
  stats.promote_failed = promote_failed_;
  MP_RETURN_IF_ERROR(
      channel_.Send(control::kCoordinatorRank, control::kTagStats, control::Encode(stats)));
  promoted_.clear();
  promote_failed_.clear();
  return OkStatus();
}

bool WorkerLoop::CollectPromotions() {
  const SequenceTable::Promotions ended = engine_.CollectPromotions();
  for (SequenceId id : ended.promoted) promoted_.push_back(static_cast<uint64_t>(id));
  for (SequenceId id : ended.failed) promote_failed_.push_back(static_cast<uint64_t>(id));
  return !ended.promoted.empty() || !ended.failed.empty();
}

Status WorkerLoop::PollDuringStep(const control::StepPlan& plan) {
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
      for (const control::StepEntry& e : plan.entries)
        if (e.job_id == cancel.job_id && e.kind == control::StepEntryKind::kPrefill) cancel_ = true;
    } else if (m->tag != control::kTagPing) {
      // The coordinator sends nothing else while a step runs.
      return InternalError("unexpected control message (tag " + std::to_string(m->tag) +
                           ") during step " + std::to_string(plan.step_id));
    }
  }
  // A coordinator that fell silent will never read the answer: stop the work.
  if (!CheckCoordinatorAlive().ok()) cancel_ = true;
  return OkStatus();
}

Status WorkerLoop::SendProgress(const control::StepPlan& plan, int64_t layers_done,
                                int64_t layers) {
  for (const control::StepEntry& e : plan.entries) {
    if (e.kind != control::StepEntryKind::kPrefill) continue;
    control::JobProgress p{
        .job_id = e.job_id,
        .tokens_done = e.begin + e.count * layers_done / std::max<int64_t>(layers, 1),
        .tokens_total = runner_.PromptTokens(e.job_id)};
    MP_RETURN_IF_ERROR(
        channel_.Send(control::kCoordinatorRank, control::kTagProgress, control::Encode(p)));
  }
  return OkStatus();
}

Status WorkerLoop::RunPlan(const control::StepPlan& plan) {
  cancel_ = false;
  Status control_error;  // a control-plane failure inside the callback ends the step and the loop
  auto after_layer = [&](int64_t done, int64_t total) {
    Status s = MaybeSendStats(0.25);
    if (s.ok() && leader()) s = PollDuringStep(plan);
    if (s.ok() && leader() && !cancel_) s = SendProgress(plan, done, total);
    if (!s.ok()) {
      control_error = s;
      return false;
    }
    return !cancel_;
  };
  MP_ASSIGN_OR_RETURN(control::StepDone done, runner_.Run(plan, after_layer));
  ++steps_run_;
  last_step_ = Clock::now();
  MP_RETURN_IF_ERROR(control_error);
  if (leader())
    MP_RETURN_IF_ERROR(
        channel_.Send(control::kCoordinatorRank, control::kTagStepDone, control::Encode(done)));
  // With no job left the KV is back to zero, and entries read back may let jobs start: say so
  // at once.
  const bool promoted = CollectPromotions();
  return MaybeSendStats(0.1, /*force=*/runner_.running() == 0 || promoted);
}

Status WorkerLoop::Run() {
  last_heard_ = Clock::now();
  MP_RETURN_IF_ERROR(MaybeSendStats(0, /*force=*/true));
  while (true) {
    MP_ASSIGN_OR_RETURN(auto oldest, channel_.Progress());
    if (oldest.count() > options_.coordinator_timeout_s)
      return FailedPreconditionError("the coordinator stopped taking messages");
    MP_ASSIGN_OR_RETURN(std::optional<control::Message> m,
                        channel_.Poll(control::kCoordinatorRank, MPI_ANY_TAG));
    if (m) {
      last_heard_ = Clock::now();
      switch (m->tag) {
        case control::kTagStep: {
          control::StepPlan plan;
          MP_RETURN_IF_ERROR(control::Decode(m->bytes, &plan));
          MP_RETURN_IF_ERROR(RunPlan(plan));
          break;
        }
        case control::kTagShutdown:
          MP_RETURN_IF_ERROR(MaybeSendStats(0, /*force=*/true));
          return channel_.Flush(std::chrono::seconds(5));
        case control::kTagAbort:
          return FailedPreconditionError("the coordinator is stopping after a failure");
        case control::kTagPing:
        case control::kTagCancel:  // for a step that already ended
          break;
        default:
          return InternalError("unexpected control message tag " + std::to_string(m->tag));
      }
      continue;
    }
    MP_RETURN_IF_ERROR(CheckCoordinatorAlive());
    MP_RETURN_IF_ERROR(MaybeSendStats(0.5, /*force=*/CollectPromotions()));
    // Steps follow each other within microseconds while jobs run: poll closely for a while
    // after a step, then relax.
    const bool recent = runner_.running() > 0 || SecondsSince(last_step_) < 1.0;
    std::this_thread::sleep_for(recent ? std::chrono::microseconds(20)
                                       : std::chrono::microseconds(2000));
  }
}

}  // namespace millipede
