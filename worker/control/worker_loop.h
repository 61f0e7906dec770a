// The service loop of one worker rank (millipede-worker): runs the coordinator's step plans on
// the engine (many jobs at once, through BatchRunner) on every worker rank at once, reports each
// step's outcome and the rank's stats. Every MPI call of the process happens on the thread that
// calls Run().
//
// Cancellation inside a step: only the worker leader (world rank 1, rank 0 of the workers'
// communicator) reads kCancel. During a step with prefill chunks it answers the engine's
// per-layer callback, and the engine combines every rank's answer (any "stop" stops all); the
// step then commits nothing and the coordinator plans again without the cancelled job. A job
// cancelled between steps is simply freed by the next plan.
#pragma once

#include <chrono>
#include <cstdint>

#include "control/messages.h"
#include "control/mpi_channel.h"
#include "worker/batch_runner.h"
#include "worker/control/counting_communicator.h"
#include "worker/engine/engine.h"

namespace millipede {

struct WorkerLoopOptions {
  // With no message from the coordinator for this long the worker gives up (the coordinator
  // pings about once a second).
  double coordinator_timeout_s = 15;
  // Positions of KV this rank's jobs may take together (reported to the coordinator, which
  // admits only jobs that fit alone and starts them while their reservations fit together).
  int64_t kv_capacity_tokens = 0;
  // Host memory for prefix-cache entries evicted from KV memory (reported; 0: no host tier).
  int64_t cache_host_bytes = 0;
  // The disk tier's size (the engine's disk tier holds the entries; reported; 0: none).
  int64_t cache_disk_bytes = 0;
};

class WorkerLoop {
 public:
  // `engine` must use `counting` (or, with one worker rank, no communicator: pass null).
  WorkerLoop(Engine& engine, const CountingCommunicator* counting, int world_rank,
             const WorkerLoopOptions& options);

  // Tells the coordinator this rank is up: its model facts, KV capacity and the attention
  // patterns and roles its engine runs.
  Status SendHello();
  // Serves step plans until the coordinator sends kShutdown (OK) or falls silent.
  Status Run();

 private:
  bool leader() const { return world_rank_ == control::kLeaderRank; }
  Status RunPlan(const control::StepPlan& plan);
  // Leader: takes the coordinator's pending messages during a step; sets cancel_ when one
  // cancels a job with a prefill chunk in `plan`.
  Status PollDuringStep(const control::StepPlan& plan);
  // Leader: each prefill chunk's progress after `layers_done` of `layers` layers.
  Status SendProgress(const control::StepPlan& plan, int64_t layers_done, int64_t layers);
  // Sends this rank's stats if `force` or the last report is older than `period_s`.
  Status MaybeSendStats(double period_s, bool force = false);
  // Takes the disk tier's ended promotions (between steps) for the next stats; whether any.
  bool CollectPromotions();
  Status CheckCoordinatorAlive() const;

  Engine& engine_;
  const CountingCommunicator* counting_;
  const int world_rank_;
  const WorkerLoopOptions options_;
  control::MpiChannel channel_;
  BatchRunner runner_;
  uint64_t steps_run_ = 0;
  // Promotions not yet reported (WorkerStats::promoted, promote_failed).
  std::vector<uint64_t> promoted_, promote_failed_;
  bool cancel_ = false;
  std::chrono::steady_clock::time_point last_heard_;
  std::chrono::steady_clock::time_point last_stats_;
  std::chrono::steady_clock::time_point last_step_;
};

}  // namespace millipede
