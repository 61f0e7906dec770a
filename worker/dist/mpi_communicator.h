// The MPI backend of the data plane (host memory): what CPU builds and tests run on.
#pragma once

#include <memory>

#include "common/mpi_check.h"
#include "worker/dist/communicator.h"

namespace millipede {

// Wraps `comm` (not owned; MPI must stay initialised while the communicator lives). Sets the
// communicator's error handler to MPI_ERRORS_RETURN so failures become statuses.
StatusOr<std::unique_ptr<Communicator>> CreateMpiCommunicator(MPI_Comm comm);

}  // namespace millipede
