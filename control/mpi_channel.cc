#include "control/mpi_channel.h"

#include <climits>
#include <thread>

namespace millipede::control {

MpiChannel::~MpiChannel() {
  for (Pending& p : pending_) {
    MPI_Cancel(&p.request);
    MPI_Request_free(&p.request);
  }
}

Status MpiChannel::Send(int dest, int tag, std::vector<char> bytes) {
  MP_REQUIRE(bytes.size() <= static_cast<size_t>(INT_MAX), "control message of ", bytes.size(),
             " bytes exceeds MPI's 2 GiB limit");
  pending_.push_back({MPI_REQUEST_NULL, std::move(bytes), std::chrono::steady_clock::now()});
  Pending& p = pending_.back();
  const int rc = MPI_Isend(p.bytes.data(), static_cast<int>(p.bytes.size()), MPI_BYTE, dest, tag,
                           comm_, &p.request);
  if (rc != MPI_SUCCESS) {
    pending_.pop_back();
    return DeviceError("MPI send to rank " + std::to_string(dest) +
                       " failed: " + detail::MpiErrorString(rc));
  }
  return OkStatus();
}

StatusOr<std::optional<Message>> MpiChannel::Poll(int source, int tag) {
  int flag = 0;
  MPI_Status status;
  MP_MPI_CHECK(MPI_Iprobe(source, tag, comm_, &flag, &status));
  if (!flag) return std::optional<Message>();
  int count = 0;
  MP_MPI_CHECK(MPI_Get_count(&status, MPI_BYTE, &count));
  Message m;
  m.source = status.MPI_SOURCE;
  m.tag = status.MPI_TAG;
  m.bytes.resize(static_cast<size_t>(count));
  MP_MPI_CHECK(
      MPI_Recv(m.bytes.data(), count, MPI_BYTE, m.source, m.tag, comm_, MPI_STATUS_IGNORE));
  return std::optional<Message>(std::move(m));
}

StatusOr<std::chrono::duration<double>> MpiChannel::Progress() {
  auto oldest = std::chrono::steady_clock::time_point::max();
  for (auto it = pending_.begin(); it != pending_.end();) {
    int done = 0;
    MP_MPI_CHECK(MPI_Test(&it->request, &done, MPI_STATUS_IGNORE));
    if (done) {
      it = pending_.erase(it);
    } else {
      oldest = std::min(oldest, it->started);
      ++it;
    }
  }
  if (pending_.empty()) return std::chrono::duration<double>(0);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - oldest);
}

Status MpiChannel::Flush(std::chrono::duration<double> timeout) {
  const auto t0 = std::chrono::steady_clock::now();
  while (true) {
    MP_ASSIGN_OR_RETURN(auto age, Progress());
    (void)age;
    if (pending_.empty()) return OkStatus();
    if (std::chrono::steady_clock::now() - t0 > timeout)
      return DeviceError(std::to_string(pending_.size()) +
                         " control message(s) were not taken by their peers in time");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace millipede::control
