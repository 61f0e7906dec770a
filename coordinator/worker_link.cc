#include "coordinator/worker_link.h"

#include <algorithm>
#include <thread>

namespace millipede {

using Clock = std::chrono::steady_clock;

WorkerLink::WorkerLink(int world_size)
    : channel_(MPI_COMM_WORLD),
      world_size_(world_size),
      last_heard_(static_cast<size_t>(world_size), Clock::now()) {}

StatusOr<std::unique_ptr<WorkerLink>> WorkerLink::Connect(int world_size, double timeout_s,
                                                          const std::atomic<bool>* interrupted) {
  MP_REQUIRE(world_size >= 2,
             "no workers: launch with mpirun -np 1 millipede-coordinator ... : -np N "
             "millipede-worker ...");
  auto link = std::unique_ptr<WorkerLink>(new WorkerLink(world_size));
  WorkerFacts& facts = link->facts_;
  facts.num_workers = world_size - 1;
  std::vector<bool> seen(static_cast<size_t>(world_size), false);
  int missing = facts.num_workers;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout_s));
  auto last_ping = Clock::now();
  while (missing > 0) {
    MP_ASSIGN_OR_RETURN(std::optional<control::Message> m,
                        link->channel_.Poll(MPI_ANY_SOURCE, control::kTagHello));
    // The workers that reported wait for the others: keep them from timing out.
    if (Clock::now() - last_ping > std::chrono::seconds(1)) {
      for (int r = 1; r < world_size; ++r)
        if (seen[static_cast<size_t>(r)])
          MP_RETURN_IF_ERROR(link->channel_.Send(r, control::kTagPing, {}));
      last_ping = Clock::now();
    }
    if (!m) {
      if (interrupted != nullptr && interrupted->load())
        return CancelledError("stopped by a signal while waiting for the workers");
      if (Clock::now() > deadline)
        return FailedPreconditionError(std::to_string(missing) +
                                       " worker(s) did not report "
                                       "within " +
                                       std::to_string(static_cast<int>(timeout_s)) +
                                       " s (loading the model may need a longer "
                                       "--startup-timeout-s)");
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    control::WorkerHello hello;
    MP_RETURN_IF_ERROR(control::Decode(m->bytes, &hello));
    MP_ASSERT(hello.rank == m->source && !seen[static_cast<size_t>(m->source)],
              "unexpected hello from rank ", m->source);
    seen[static_cast<size_t>(m->source)] = true;
    --missing;
    if (hello.status_code != 0)
      return FailedPreconditionError("worker rank " + std::to_string(hello.rank) +
                                     " failed to start: " + hello.error);
    if (facts.vocab_size == 0) {
      facts.vocab_size = hello.vocab_size;
      facts.max_context = hello.max_context;
      facts.kv_capacity_per_rank = hello.kv_capacity_tokens;
      facts.eos_ids = hello.eos_ids;
      facts.backend = hello.backend;
      facts.num_layers = hello.num_layers;
      facts.num_kv_heads = hello.num_kv_heads;
      facts.capabilities = hello.capabilities;
      facts.default_policy = hello.default_policy;
      facts.kv_dtype = hello.kv_dtype;
      facts.cache_host_bytes = hello.cache_host_bytes;
      facts.cache_disk_bytes = hello.cache_disk_bytes;
      facts.weights_fingerprint = hello.weights_fingerprint;
      facts.kv_share_unit_rows = hello.kv_share_unit_rows;
    } else {
      MP_REQUIRE(hello.vocab_size == facts.vocab_size && hello.max_context == facts.max_context,
                 "worker rank ", hello.rank, " serves a different model (vocab ", hello.vocab_size,
                 ", context ", hello.max_context, ") than rank 1 (vocab ", facts.vocab_size,
                 ", context ", facts.max_context, ")");
      facts.kv_capacity_per_rank = std::min(facts.kv_capacity_per_rank, hello.kv_capacity_tokens);
      facts.capabilities = IntersectCapabilities(facts.capabilities, hello.capabilities);
      facts.cache_host_bytes = std::min(facts.cache_host_bytes, hello.cache_host_bytes);
      facts.cache_disk_bytes = std::min(facts.cache_disk_bytes, hello.cache_disk_bytes);
      facts.kv_share_unit_rows = facts.kv_share_unit_rows == 0 || hello.kv_share_unit_rows == 0
                                     ? 0
                                     : std::max(facts.kv_share_unit_rows, hello.kv_share_unit_rows);
    }
    facts.disk_entries.resize(static_cast<size_t>(world_size - 1));
    facts.disk_entries[static_cast<size_t>(hello.rank - 1)] = std::move(hello.disk_entries);
    facts.selected_kv_host = facts.selected_kv_host || hello.selected_kv_host;
    facts.kv_position_bytes = std::max(facts.kv_position_bytes, hello.kv_position_bytes);
  }
  std::fill(link->last_heard_.begin(), link->last_heard_.end(), Clock::now());
  return link;
}

Status WorkerLink::SendToAll(int tag, const std::vector<char>& bytes) {
  for (int r = 1; r < world_size_; ++r) MP_RETURN_IF_ERROR(channel_.Send(r, tag, bytes));
  return OkStatus();
}

Status WorkerLink::SendStep(const control::StepPlan& plan) {
  return SendToAll(control::kTagStep, control::Encode(plan));
}

Status WorkerLink::CancelJob(uint64_t job_id) {
  return channel_.Send(control::kLeaderRank, control::kTagCancel,
                       control::Encode(control::JobCancel{job_id}));
}

Status WorkerLink::Ping() { return SendToAll(control::kTagPing, {}); }

Status WorkerLink::Shutdown(double timeout_s) {
  MP_RETURN_IF_ERROR(SendToAll(control::kTagShutdown, {}));
  return channel_.Flush(std::chrono::duration<double>(timeout_s));
}

StatusOr<std::optional<control::Message>> WorkerLink::Poll() {
  MP_ASSIGN_OR_RETURN(std::optional<control::Message> m,
                      channel_.Poll(MPI_ANY_SOURCE, MPI_ANY_TAG));
  if (m && m->source > 0 && m->source < world_size_)
    last_heard_[static_cast<size_t>(m->source)] = Clock::now();
  return m;
}

Status WorkerLink::CheckAlive(double timeout_s) {
  MP_ASSIGN_OR_RETURN(auto oldest_send, channel_.Progress());
  if (oldest_send.count() > timeout_s)
    return FailedPreconditionError("a worker has not taken a control message for " +
                                   std::to_string(static_cast<int>(oldest_send.count())) + " s");
  const auto now = Clock::now();
  for (int r = 1; r < world_size_; ++r) {
    const double silent =
        std::chrono::duration<double>(now - last_heard_[static_cast<size_t>(r)]).count();
    if (silent > timeout_s)
      return FailedPreconditionError("worker rank " + std::to_string(r) +
                                     " stopped responding (silent for " +
                                     std::to_string(static_cast<int>(silent)) + " s)");
  }
  return OkStatus();
}

WorkerLink::Silence WorkerLink::LongestSilence() const {
  const auto now = Clock::now();
  Silence longest;
  for (int r = 1; r < world_size_; ++r) {
    const double silent =
        std::chrono::duration<double>(now - last_heard_[static_cast<size_t>(r)]).count();
    if (longest.rank == 0 || silent > longest.seconds) longest = {r, silent};
  }
  return longest;
}

}  // namespace millipede
