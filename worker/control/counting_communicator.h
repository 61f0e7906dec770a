// A Communicator that forwards to another and counts what the data plane costs this rank: the
// seconds spent in its calls (waiting for transfers and collectives) and the bytes this rank
// sends. The worker reports both to the coordinator's metrics.
#pragma once

#include <memory>

#include "worker/dist/communicator.h"

namespace millipede {

struct CommCounters {
  double seconds = 0;
  int64_t bytes_sent = 0;
};

class CountingCommunicator final : public Communicator {
 public:
  explicit CountingCommunicator(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {}

  const CommCounters& counters() const { return counters_; }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const char* name() const override { return inner_->name(); }
  Status StartSendRecv(ConstTensorView send, int to, TensorView recv, int from) override;
  Status WaitAll() override;
  Status AllGather(ConstTensorView send, TensorView recv) override;
  Status AllReduce(TensorView buf, ReduceOp op) override;
  Status Broadcast(TensorView buf, int root) override;
  Status Barrier() override;
  Status HostAllGather(const void* send, void* recv, size_t bytes) override;
  Status HostBroadcast(void* buf, size_t bytes, int root) override;

 private:
  // Runs `call`, adding its wall time and `bytes` to the counters.
  template <typename F>
  Status Count(int64_t bytes, F&& call);

  std::unique_ptr<Communicator> inner_;
  CommCounters counters_;
};

}  // namespace millipede
