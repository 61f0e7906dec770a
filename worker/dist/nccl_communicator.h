// The NCCL backend of the data plane (device memory), for CUDA builds: ring transfers run on a
// stream of their own, ordered against the compute stream (the calling thread's default stream,
// which the CUDA backend uses) by events, so compute never waits on the host for them. Control
// values (host memory) go over MPI.
#pragma once

#include <memory>

#include "common/mpi_check.h"
#include "worker/dist/communicator.h"

namespace millipede {

// Collective over every rank of `comm`: rank 0 creates the NCCL id and broadcasts it over MPI.
// The current CUDA device must already be the rank's GPU. `comm` must outlive the result.
StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(MPI_Comm comm);

}  // namespace millipede
