// The service loop of one worker rank (millipede-worker): waits for jobs from the coordinator,
// runs each with Generate on every worker rank at once, streams its events back and reports the
// rank's stats. Every MPI call of the process happens on the thread that calls Run().
//
// Cancellation: only the worker leader (world rank 1, rank 0 of the workers' communicator)
// reads kCancel. During prefill it answers the engine's per-layer progress callback, and the
// engine combines every rank's answer (any "stop" stops all). During decode the leader's answer
// is broadcast over the workers' communicator inside the token callback, so every rank returns
// the same value at the same step, as Generate requires.
#pragma once

#include <chrono>
#include <cstdint>

#include "control/messages.h"
#include "control/mpi_channel.h"
#include "worker/control/counting_communicator.h"
#include "worker/engine/engine.h"

namespace millipede {

struct WorkerLoopOptions {
  // With no message from the coordinator for this long the worker gives up (the coordinator
  // pings about once a second).
  double coordinator_timeout_s = 30;
  // Positions of KV one job may take on this rank (reported to the coordinator, which admits
  // only jobs that fit).
  int64_t kv_capacity_tokens = 0;
};

class WorkerLoop {
 public:
  // `engine` must use `counting` (or, with one worker rank, no communicator: pass null).
  WorkerLoop(Engine& engine, const CountingCommunicator* counting, int world_rank,
             const WorkerLoopOptions& options);

  // Tells the coordinator this rank is up: its model facts, KV capacity and the attention
  // patterns and roles its engine runs.
  Status SendHello();
  // Serves jobs until the coordinator sends kShutdown (OK) or falls silent (Unavailable).
  Status Run();

 private:
  bool leader() const { return world_rank_ == control::kLeaderRank; }
  Status RunJob(const control::JobDescriptor& job);
  // Leader: takes the coordinator's pending messages during a job; sets cancel_ for this job.
  Status PollDuringJob(uint64_t job_id);
  Status SendEvent(const control::JobEvent& event);
  // Sends this rank's stats if `force` or the last report is older than `period_s`.
  Status MaybeSendStats(uint64_t running_job, double period_s, bool force = false);
  Status CheckCoordinatorAlive() const;

  Engine& engine_;
  const CountingCommunicator* counting_;
  const int world_rank_;
  const WorkerLoopOptions options_;
  control::MpiChannel channel_;
  uint64_t jobs_run_ = 0;
  bool cancel_ = false;
  std::chrono::steady_clock::time_point last_heard_;
  std::chrono::steady_clock::time_point last_stats_;
};

}  // namespace millipede
