#include "worker/control/heartbeat.h"

#include "control/messages.h"
#include "control/mpi_channel.h"

namespace millipede {

std::unique_ptr<Heartbeat> Heartbeat::Start(int dest, std::chrono::milliseconds period,
                                            std::function<void()> on_abort) {
  std::unique_ptr<Heartbeat> h(new Heartbeat());
  h->thread_ = std::thread([raw = h.get(), dest, period, on_abort = std::move(on_abort)] {
    raw->Beat(dest, period, on_abort);
  });
  return h;
}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Heartbeat::Beat(int dest, std::chrono::milliseconds period,
                     const std::function<void()>& on_abort) {
  control::MpiChannel channel(MPI_COMM_WORLD);  // its pending beats are cancelled with it
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    // Beats pile up only while the coordinator is not taking them: keep at most a few.
    StatusOr<std::chrono::duration<double>> oldest = channel.Progress();
    if (!oldest.ok()) return;
    if (oldest->count() < 3.0 * std::chrono::duration<double>(period).count()) {
      if (!channel.Send(dest, control::kTagHeartbeat, {}).ok()) return;
    }
    int waiting = 0;
    if (MPI_Iprobe(dest, control::kTagAbort, MPI_COMM_WORLD, &waiting, MPI_STATUS_IGNORE) !=
        MPI_SUCCESS)
      return;
    if (waiting) {
      lock.unlock();
      on_abort();
      return;
    }
    wake_.wait_for(lock, period, [this] { return stop_; });
  }
}

}  // namespace millipede
