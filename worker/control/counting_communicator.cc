#include "worker/control/counting_communicator.h"

#include <chrono>

namespace millipede {

template <typename F>
Status CountingCommunicator::Count(int64_t bytes, F&& call) {
  const auto t0 = std::chrono::steady_clock::now();
  Status s = call();
  counters_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (s.ok()) counters_.bytes_sent += bytes;
  return s;
}

Status CountingCommunicator::StartSendRecv(ConstTensorView send, int to, TensorView recv,
                                           int from) {
  const int64_t bytes = to >= 0 ? static_cast<int64_t>(send.NumBytes()) : 0;
  return Count(bytes, [&] { return inner_->StartSendRecv(send, to, recv, from); });
}

Status CountingCommunicator::WaitAll() {
  return Count(0, [&] { return inner_->WaitAll(); });
}

// Collectives: counted as what this rank contributes once (the algorithm underneath may move it
// more than once).
Status CountingCommunicator::AllGather(ConstTensorView send, TensorView recv) {
  return Count(static_cast<int64_t>(send.NumBytes()),
               [&] { return inner_->AllGather(send, recv); });
}

Status CountingCommunicator::AllReduce(TensorView buf, ReduceOp op) {
  return Count(static_cast<int64_t>(buf.NumBytes()), [&] { return inner_->AllReduce(buf, op); });
}

Status CountingCommunicator::Broadcast(TensorView buf, int root) {
  const int64_t bytes = root == rank() ? static_cast<int64_t>(buf.NumBytes()) : 0;
  return Count(bytes, [&] { return inner_->Broadcast(buf, root); });
}

Status CountingCommunicator::Barrier() {
  return Count(0, [&] { return inner_->Barrier(); });
}

Status CountingCommunicator::HostAllGather(const void* send, void* recv, size_t bytes) {
  return Count(static_cast<int64_t>(bytes),
               [&] { return inner_->HostAllGather(send, recv, bytes); });
}

Status CountingCommunicator::HostBroadcast(void* buf, size_t bytes, int root) {
  const int64_t sent = root == rank() ? static_cast<int64_t>(bytes) : 0;
  return Count(sent, [&] { return inner_->HostBroadcast(buf, bytes, root); });
}

}  // namespace millipede
