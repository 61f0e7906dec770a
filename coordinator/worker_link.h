// The coordinator's end of the MPI control plane (control/messages.h): the handshake with the
// workers, step/cancel/ping/shutdown messages to them, their results, progress, stats and
// heartbeats back, and liveness (every worker beats every half second from a thread of its own;
// a worker silent past the timeout, or a send it never takes, counts as dead).
// Every call must come from the one thread that makes the coordinator's MPI calls.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "control/messages.h"
#include "control/mpi_channel.h"

namespace millipede {

// What the workers reported at the handshake.
struct WorkerFacts {
  int num_workers = 0;
  int64_t vocab_size = 0;
  int64_t max_context = 0;
  // The smallest per-rank KV capacity (positions one job may take on one rank).
  int64_t kv_capacity_per_rank = 0;
  std::vector<int32_t> eos_ids;
  std::string backend;  // for the logs
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;
  // What every worker runs (the intersection of their reports).
  PolicyCapabilities capabilities;
  // Rank 1's policy for jobs that bring none, and its KV dtype (the prefix cache's key).
  AttentionPolicy default_policy;
  std::string kv_dtype;
  // Some rank may keep OmniKV's selected layers in its host tier.
  bool selected_kv_host = false;
  // Bytes of one position's K and V over every layer on a rank (the largest report).
  int64_t kv_position_bytes = 0;
  // The unit of the workers' shared KV blocks (the largest report; 0 when any rank shares none).
  int64_t kv_share_unit_rows = 0;
  // Host memory each rank gives prefix-cache entries evicted from its KV memory (the smallest
  // report; 0: no host tier).
  int64_t cache_host_bytes = 0;
  // The disk tier each rank gives the cache (the smallest report; 0: none), and the entries
  // each worker (index 0: world rank 1) found on its disk at start.
  int64_t cache_disk_bytes = 0;
  std::vector<std::vector<control::CacheEntryFacts>> disk_entries;
  // Rank 1's weights fingerprint (the prefix cache's key).
  std::string weights_fingerprint;
};

class WorkerLink {
 public:
  // Waits up to `timeout_s` for every worker's hello (world ranks 1..world_size-1). Fails if a
  // worker's engine did not come up (with its reason), the workers disagree about the model, or
  // one stays silent.
  // Gives up with Cancelled once `*interrupted` is true (a signal while waiting).
  static StatusOr<std::unique_ptr<WorkerLink>> Connect(int world_size, double timeout_s,
                                                       const std::atomic<bool>* interrupted);

  const WorkerFacts& facts() const { return facts_; }

  // A step plan to every worker.
  Status SendStep(const control::StepPlan& plan);
  // Asks the worker leader to stop the step in flight, which prefills the job.
  Status CancelJob(uint64_t job_id);
  // Tells every worker the coordinator is alive.
  Status Ping();
  // Tells every worker to exit and waits (up to `timeout_s`) until they took the message.
  Status Shutdown(double timeout_s);
  // One message from any worker, or nullopt; notes the sender as alive.
  StatusOr<std::optional<control::Message>> Poll();
  // FailedPrecondition naming the first worker silent for more than `timeout_s`, or a message
  // not taken for that long.
  Status CheckAlive(double timeout_s);

  // The worker silent the longest (world rank) and for how many seconds.
  struct Silence {
    int rank = 0;
    double seconds = 0;
  };
  Silence LongestSilence() const;

 private:
  explicit WorkerLink(int world_size);
  Status SendToAll(int tag, const std::vector<char>& bytes);

  control::MpiChannel channel_;
  int world_size_;
  WorkerFacts facts_;
  std::vector<std::chrono::steady_clock::time_point> last_heard_;  // by world rank
};

}  // namespace millipede
