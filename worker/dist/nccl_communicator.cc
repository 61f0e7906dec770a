#include "worker/dist/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include "common/cuda_check.h"
#include "common/nccl_check.h"
#include "worker/dist/mpi_communicator.h"

namespace millipede {
namespace {

StatusOr<ncclDataType_t> NcclType(DType dtype) {
  switch (dtype) {
    case DType::kF32: return ncclFloat32;
    case DType::kF64: return ncclFloat64;
    case DType::kI32: return ncclInt32;
    case DType::kI64: return ncclInt64;
    default:
      return InvalidArgumentError(std::string("no NCCL reduction for dtype ") + DTypeName(dtype));
  }
}

class NcclCommunicator final : public Communicator {
 public:
  ~NcclCommunicator() override {
    if (comm_ != nullptr) ncclCommAbort(comm_);  // pending work belongs to a failed step
    if (ring_stream_ != nullptr) cudaStreamDestroy(ring_stream_);
    if (ready_ != nullptr) cudaEventDestroy(ready_);
    if (done_ != nullptr) cudaEventDestroy(done_);
  }

  static StatusOr<std::unique_ptr<Communicator>> Create(MPI_Comm mpi) {
    auto c = std::unique_ptr<NcclCommunicator>(new NcclCommunicator());
    MP_ASSIGN_OR_RETURN(c->host_, CreateMpiCommunicator(mpi));
    ncclUniqueId id;
    if (c->host_->rank() == 0) MP_NCCL_CHECK(ncclGetUniqueId(&id));
    MP_RETURN_IF_ERROR(c->host_->HostBroadcast(&id, sizeof(id), 0));
    MP_NCCL_CHECK(ncclCommInitRank(&c->comm_, c->host_->size(), id, c->host_->rank()));
    MP_CUDA_CHECK(cudaStreamCreateWithFlags(&c->ring_stream_, cudaStreamNonBlocking));
    MP_CUDA_CHECK(cudaEventCreateWithFlags(&c->ready_, cudaEventDisableTiming));
    MP_CUDA_CHECK(cudaEventCreateWithFlags(&c->done_, cudaEventDisableTiming));
    MP_RETURN_IF_ERROR(c->ConnectPeers());
    return std::unique_ptr<Communicator>(std::move(c));
  }

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  const char* name() const override { return "nccl"; }

  Status StartSendRecv(ConstTensorView send, int to, TensorView recv, int from) override {
    return Annotate(StartSendRecvImpl(send, to, recv, from), "send/recv");
  }
  Status WaitAll() override {
    if (!pending_) return OkStatus();
    pending_ = false;
    return Annotate([&]() -> Status {
      MP_CUDA_CHECK(cudaEventRecord(done_, ring_stream_));
      MP_CUDA_CHECK(cudaStreamWaitEvent(compute_, done_, 0));
      return OkStatus();
    }(), "wait");
  }
  Status AllGather(ConstTensorView send, TensorView recv) override {
    return Annotate([&]() -> Status {
      MP_REQUIRE(recv.NumBytes() == send.NumBytes() * static_cast<size_t>(size()),
                 "receive buffer of ", recv.NumBytes(), " bytes, expected ", size(), " x ",
                 send.NumBytes());
      MP_NCCL_CHECK(ncclAllGather(send.data, recv.data, send.NumBytes(), ncclInt8, comm_,
                                  compute_));
      return OkStatus();
    }(), "all-gather");
  }
  Status AllReduce(TensorView buf, ReduceOp op) override {
    return Annotate([&]() -> Status {
      MP_ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(buf.dtype));
      MP_NCCL_CHECK(ncclAllReduce(buf.data, buf.data, static_cast<size_t>(buf.NumElements()),
                                  type, op == ReduceOp::kSum ? ncclSum : ncclMax, comm_,
                                  compute_));
      return OkStatus();
    }(), "all-reduce");
  }
  Status Broadcast(TensorView buf, int root) override {
    return Annotate([&]() -> Status {
      MP_NCCL_CHECK(ncclBroadcast(buf.data, buf.data, buf.NumBytes(), ncclInt8, root, comm_,
                                  compute_));
      return OkStatus();
    }(), "broadcast");
  }
  Status Barrier() override { return host_->Barrier(); }
  Status HostAllGather(const void* send, void* recv, size_t bytes) override {
    return host_->HostAllGather(send, recv, bytes);
  }
  Status HostBroadcast(void* buf, size_t bytes, int root) override {
    return host_->HostBroadcast(buf, bytes, root);
  }

 private:
  NcclCommunicator() = default;

  // NCCL connects a pair of ranks on their first transfer, which takes a good part of a second;
  // a prefill that exchanges queries (pass-Q) talks to every rank, not just its ring neighbours,
  // so every pair is connected here, before any job waits for it.
  Status ConnectPeers() {
    if (size() <= 2) return OkStatus();
    void* buf = nullptr;
    MP_CUDA_CHECK(cudaMalloc(&buf, 2 * sizeof(float)));
    Status s;
    for (int t = 1; t < size() && s.ok(); ++t) {
      const int to = (rank() + t) % size(), from = (rank() - t + size()) % size();
      s = StartSendRecvImpl(ConstTensorView{buf, DType::kF32, Shape{1}}, to,
                            TensorView{static_cast<float*>(buf) + 1, DType::kF32, Shape{1}}, from);
      if (s.ok()) s = WaitAll();
    }
    const cudaError_t synced = cudaStreamSynchronize(compute_);
    cudaFree(buf);
    MP_RETURN_IF_ERROR(s);
    MP_CUDA_CHECK(synced);
    return OkStatus();
  }

  Status StartSendRecvImpl(ConstTensorView send, int to, TensorView recv, int from) {
    MP_REQUIRE(to >= -1 && to < size() && from >= -1 && from < size(), "peer ", to, "/", from,
               " outside [0, ", size(), ")");
    // The ring stream must not read `send` (or overwrite `recv`) before compute is done with
    // them: it waits for everything queued on the compute stream so far.
    MP_CUDA_CHECK(cudaEventRecord(ready_, compute_));
    MP_CUDA_CHECK(cudaStreamWaitEvent(ring_stream_, ready_, 0));
    MP_NCCL_CHECK(ncclGroupStart());
    // Both sides of a pair agree on sizes, so a zero-byte transfer is skipped on both.
    if (to >= 0 && send.NumBytes() > 0)
      MP_NCCL_CHECK(ncclSend(send.data, send.NumBytes(), ncclInt8, to, comm_, ring_stream_));
    if (from >= 0 && recv.NumBytes() > 0)
      MP_NCCL_CHECK(ncclRecv(recv.data, recv.NumBytes(), ncclInt8, from, comm_, ring_stream_));
    MP_NCCL_CHECK(ncclGroupEnd());
    pending_ = true;
    return OkStatus();
  }

  std::unique_ptr<Communicator> host_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t compute_ = cudaStreamPerThread;
  cudaStream_t ring_stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;
  cudaEvent_t done_ = nullptr;
  bool pending_ = false;
};

}  // namespace

StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(MPI_Comm comm) {
  return NcclCommunicator::Create(comm);
}

}  // namespace millipede
