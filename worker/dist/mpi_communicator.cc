#include "worker/dist/mpi_communicator.h"

#include <climits>
#include <vector>

namespace millipede {
namespace {

StatusOr<MPI_Datatype> MpiType(DType dtype) {
  switch (dtype) {
    case DType::kF32: return MPI_FLOAT;
    case DType::kF64: return MPI_DOUBLE;
    case DType::kI32: return MPI_INT32_T;
    case DType::kI64: return MPI_INT64_T;
    default:
      return InvalidArgumentError(std::string("no MPI reduction for dtype ") + DTypeName(dtype));
  }
}

// MPI counts are int: messages are sent as bytes, so a single message is limited to 2 GiB.
StatusOr<int> ByteCount(size_t bytes, const char* op) {
  if (bytes > static_cast<size_t>(INT_MAX))
    return InvalidArgumentError(std::string(op) + ": message of " + std::to_string(bytes) +
                                " bytes exceeds MPI's 2 GiB limit");
  return static_cast<int>(bytes);
}

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm, int rank, int size)
      : comm_(comm), rank_(rank), size_(size) {}
  // Transfers still pending here belong to a step that failed: cancel them rather than wait for
  // a peer that may never answer (their buffers may already be gone).
  ~MpiCommunicator() override {
    for (MPI_Request& r : pending_) {
      MPI_Cancel(&r);
      MPI_Request_free(&r);
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "mpi"; }

  Status StartSendRecv(ConstTensorView send, int to, TensorView recv, int from) override {
    return Annotate(StartSendRecvImpl(send, to, recv, from), "send/recv");
  }
  Status WaitAll() override {
    if (pending_.empty()) return OkStatus();
    std::vector<MPI_Request> requests;
    requests.swap(pending_);
    return Annotate(WaitAllImpl(requests), "wait");
  }
  Status AllGather(ConstTensorView send, TensorView recv) override {
    return Annotate(AllGatherImpl(send, recv), "all-gather");
  }
  Status HostAllGather(const void* send, void* recv, size_t bytes) override {
    return AllGather(ConstTensorView{send, DType::kU8, Shape{static_cast<int64_t>(bytes)}},
                     TensorView{recv, DType::kU8, Shape{static_cast<int64_t>(bytes) * size_}});
  }
  Status HostBroadcast(void* buf, size_t bytes, int root) override {
    return Broadcast(TensorView{buf, DType::kU8, Shape{static_cast<int64_t>(bytes)}}, root);
  }
  Status AllReduce(TensorView buf, ReduceOp op) override {
    return Annotate(AllReduceImpl(buf, op), "all-reduce");
  }
  Status Broadcast(TensorView buf, int root) override {
    return Annotate(BroadcastImpl(buf, root), "broadcast");
  }
  Status Barrier() override {
    return Annotate([&]() -> Status {
      MP_MPI_CHECK(MPI_Barrier(comm_));
      return OkStatus();
    }(), "barrier");
  }

 private:
  static constexpr int kRingTag = 7001;

  Status StartSendRecvImpl(ConstTensorView send, int to, TensorView recv, int from) {
    MP_REQUIRE(to >= -1 && to < size_ && from >= -1 && from < size_, "peer ", to, "/", from,
               " outside [0, ", size_, ")");
    if (from >= 0) {
      MP_ASSIGN_OR_RETURN(int n, ByteCount(recv.NumBytes(), "recv"));
      MPI_Request r;
      MP_MPI_CHECK(MPI_Irecv(recv.data, n, MPI_BYTE, from, kRingTag, comm_, &r));
      pending_.push_back(r);
    }
    if (to >= 0) {
      MP_ASSIGN_OR_RETURN(int n, ByteCount(send.NumBytes(), "send"));
      MPI_Request r;
      MP_MPI_CHECK(MPI_Isend(send.data, n, MPI_BYTE, to, kRingTag, comm_, &r));
      pending_.push_back(r);
    }
    return OkStatus();
  }
  Status WaitAllImpl(std::vector<MPI_Request>& requests) {
    std::vector<MPI_Status> statuses(requests.size());
    MP_MPI_CHECK(MPI_Waitall(static_cast<int>(requests.size()), requests.data(),
                             statuses.data()));
    return OkStatus();
  }
  Status AllGatherImpl(ConstTensorView send, TensorView recv) {
    MP_REQUIRE(recv.NumBytes() == send.NumBytes() * static_cast<size_t>(size_),
               "receive buffer of ", recv.NumBytes(), " bytes, expected ", size_, " x ",
               send.NumBytes());
    MP_ASSIGN_OR_RETURN(int n, ByteCount(send.NumBytes(), "all-gather"));
    MP_MPI_CHECK(MPI_Allgather(send.data, n, MPI_BYTE, recv.data, n, MPI_BYTE, comm_));
    return OkStatus();
  }
  Status AllReduceImpl(TensorView buf, ReduceOp op) {
    MP_ASSIGN_OR_RETURN(MPI_Datatype type, MpiType(buf.dtype));
    MP_REQUIRE(buf.NumElements() <= INT_MAX, "all-reduce of ", buf.NumElements(),
               " elements exceeds MPI's int count");
    MP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf.data, static_cast<int>(buf.NumElements()), type,
                               op == ReduceOp::kSum ? MPI_SUM : MPI_MAX, comm_));
    return OkStatus();
  }
  Status BroadcastImpl(TensorView buf, int root) {
    MP_REQUIRE(root >= 0 && root < size_, "root ", root, " outside [0, ", size_, ")");
    MP_ASSIGN_OR_RETURN(int n, ByteCount(buf.NumBytes(), "broadcast"));
    MP_MPI_CHECK(MPI_Bcast(buf.data, n, MPI_BYTE, root, comm_));
    return OkStatus();
  }

  MPI_Comm comm_;
  int rank_;
  int size_;
  std::vector<MPI_Request> pending_;
};

}  // namespace

StatusOr<std::unique_ptr<Communicator>> CreateMpiCommunicator(MPI_Comm comm) {
  int rank = 0, size = 0;
  MP_MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
  MP_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MP_MPI_CHECK(MPI_Comm_size(comm, &size));
  return std::unique_ptr<Communicator>(new MpiCommunicator(comm, rank, size));
}

}  // namespace millipede
