// The data plane between the worker ranks of one job: point-to-point ring exchanges and the
// collectives the context-parallel algorithms need. One interface, two backends: MPI (CPU builds,
// host memory) and NCCL (GPU builds, device memory). Errors name the rank and the operation.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

enum class ReduceOp { kSum, kMax };

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "mpi", "nccl" or "local".
  virtual const char* name() const = 0;

  // Starts sending `send` to rank `to` while receiving `recv` from rank `from` (one ring step).
  // Either side may be skipped with to / from = -1. Returns at once; the buffers must stay
  // untouched until WaitAll. Messages between a pair of ranks arrive in the order sent.
  virtual Status StartSendRecv(ConstTensorView send, int to, TensorView recv, int from) = 0;
  // Completes every transfer started since the last WaitAll.
  virtual Status WaitAll() = 0;

  // recv [size, ...] = every rank's `send` [...], in rank order. Blocking.
  virtual Status AllGather(ConstTensorView send, TensorView recv) = 0;
  // Elementwise reduction of `buf` over all ranks, in place (F32, F64, I32, I64). Blocking.
  virtual Status AllReduce(TensorView buf, ReduceOp op) = 0;
  // `buf` of rank `root` copied to every rank. Blocking.
  virtual Status Broadcast(TensorView buf, int root) = 0;
  // Waits for every rank.
  virtual Status Barrier() = 0;

  // Control values in host memory (step metadata, sampled tokens), whatever memory the data
  // plane uses: `recv` gets `bytes` from every rank in rank order / `buf` gets root's bytes.
  virtual Status HostAllGather(const void* send, void* recv, size_t bytes) = 0;
  virtual Status HostBroadcast(void* buf, size_t bytes, int root) = 0;

 protected:
  // Prefixes an error with "rank R/N <op>: ".
  Status Annotate(Status s, const char* op) const {
    if (s.ok()) return s;
    return s.WithContext("rank " + std::to_string(rank()) + "/" + std::to_string(size()) + " " +
                         op);
  }
};

// A single rank talking to itself: what a one-process run uses.
std::unique_ptr<Communicator> CreateLocalCommunicator();

}  // namespace millipede
