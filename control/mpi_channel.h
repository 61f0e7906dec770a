// Non-blocking point-to-point messages of bytes over one MPI communicator, for a process that
// polls: sends never block (MPI_Isend; the buffer is kept until the send completes) and receives
// take only what has already arrived (MPI_Iprobe). A peer that died therefore shows up as a send
// that never completes or a silence, which the caller times out on, never as a hang here.
// Not thread-safe: one thread per process makes every MPI call.
#pragma once

#include <chrono>
#include <deque>
#include <optional>
#include <vector>

#include "common/mpi_check.h"

namespace millipede::control {

struct Message {
  int source = 0;
  int tag = 0;
  std::vector<char> bytes;
};

class MpiChannel {
 public:
  // `comm` must stay valid while the channel lives; its error handler should be
  // MPI_ERRORS_RETURN so that failures become statuses.
  explicit MpiChannel(MPI_Comm comm) : comm_(comm) {}
  // Cancels sends still pending (their peer is gone or never answered).
  ~MpiChannel();
  MpiChannel(const MpiChannel&) = delete;
  MpiChannel& operator=(const MpiChannel&) = delete;

  // Starts sending `bytes` to `dest` with `tag`. Messages to one peer arrive in the order sent.
  Status Send(int dest, int tag, std::vector<char> bytes);
  // Receives one message that has arrived from `source` (or MPI_ANY_SOURCE) with `tag` (or
  // MPI_ANY_TAG); nullopt when none is waiting.
  StatusOr<std::optional<Message>> Poll(int source, int tag);
  // Completes the sends that can complete; returns how long the oldest unfinished send has been
  // waiting (zero when none is pending).
  StatusOr<std::chrono::duration<double>> Progress();
  // Progress() until every send completed or `timeout` passed; DeviceError on timeout.
  Status Flush(std::chrono::duration<double> timeout);

 private:
  struct Pending {
    MPI_Request request;
    std::vector<char> bytes;
    std::chrono::steady_clock::time_point started;
  };
  MPI_Comm comm_;
  std::deque<Pending> pending_;
};

}  // namespace millipede::control
