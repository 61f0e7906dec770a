#include <cstring>

#include "worker/dist/communicator.h"

namespace millipede {
namespace {

// With one rank every collective is a copy (or nothing), and a ring step sends to itself.
class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* name() const override { return "local"; }

  Status StartSendRecv(ConstTensorView send, int to, TensorView recv, int from) override {
    MP_REQUIRE((to == -1 || to == 0) && (from == -1 || from == 0), "local send/recv: peer ",
               to, "/", from, " does not exist in a 1-rank group");
    if (to == 0 && from == 0) {
      MP_REQUIRE(send.NumBytes() == recv.NumBytes(), "local send/recv: ", send.NumBytes(),
                 " bytes sent but ", recv.NumBytes(), " expected");
      if (send.data != recv.data) std::memmove(recv.data, send.data, send.NumBytes());
    }
    return OkStatus();
  }
  Status WaitAll() override { return OkStatus(); }
  Status AllGather(ConstTensorView send, TensorView recv) override {
    MP_REQUIRE(send.NumBytes() == recv.NumBytes(), "local all-gather: size mismatch");
    if (send.data != recv.data) std::memmove(recv.data, send.data, send.NumBytes());
    return OkStatus();
  }
  Status AllReduce(TensorView, ReduceOp) override { return OkStatus(); }
  Status Broadcast(TensorView, int root) override {
    MP_REQUIRE(root == 0, "local broadcast: root ", root, " does not exist");
    return OkStatus();
  }
  Status Barrier() override { return OkStatus(); }
  Status HostAllGather(const void* send, void* recv, size_t bytes) override {
    if (send != recv) std::memmove(recv, send, bytes);
    return OkStatus();
  }
  Status HostBroadcast(void*, size_t, int root) override {
    MP_REQUIRE(root == 0, "local broadcast: root ", root, " does not exist");
    return OkStatus();
  }
};

}  // namespace

std::unique_ptr<Communicator> CreateLocalCommunicator() {
  return std::make_unique<LocalCommunicator>();
}

}  // namespace millipede
