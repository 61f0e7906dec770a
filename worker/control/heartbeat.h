// A worker's heartbeat: a thread that tells the coordinator every `period` that this process is
// alive, whatever its main thread is doing (a long layer, a collective waiting on a dead peer).
// So the coordinator's liveness check does not depend on compute progress, and after a rank dies
// the ranks still alive keep beating: the silent one is the one that died. The thread also
// watches for the coordinator's kAbort, which a main thread blocked on a dead peer would never
// read. Needs MPI initialised with MPI_THREAD_MULTIPLE (the thread makes MPI calls of its own).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace millipede {

class Heartbeat {
 public:
  // Starts beating to world rank `dest` (kTagHeartbeat messages without payload). When a kAbort
  // from `dest` is waiting (not received: the main thread may take it too) `on_abort` runs on the
  // heartbeat thread; it is expected to end the process.
  static std::unique_ptr<Heartbeat> Start(int dest, std::chrono::milliseconds period,
                                          std::function<void()> on_abort);
  // Stops the thread and cancels beats not yet taken.
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

 private:
  Heartbeat() = default;
  void Beat(int dest, std::chrono::milliseconds period, const std::function<void()>& on_abort);

  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace millipede
