// The engine flags millipede-run and millipede-worker share, and the data plane they create.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/flags.h"
#include "common/mpi_check.h"
#include "worker/dist/communicator.h"
#include "worker/engine/engine.h"

namespace millipede {

// Usage lines for the engine flags (--model, --kv-dtype, --prefill-chunk, --attention-chunk,
// --policy, --selected-kv, --profile, --backend).
extern const char kEngineFlagsUsage[];
// Their names, for Flags::CheckKnown.
std::vector<std::string> EngineFlagNames();

// EngineOptions from the engine flags; `local_rank` (the rank among the processes on this node)
// picks the GPU of the cuda backend.
StatusOr<EngineOptions> ParseEngineFlags(const Flags& flags, int local_rank);

// The data plane between the ranks of `comm`: none (null) for a single rank, NCCL for the cuda
// backend (selecting GPU `local_rank` first), MPI otherwise. Collective over `comm`.
StatusOr<std::unique_ptr<Communicator>> CreateDataPlane(MPI_Comm comm, int local_rank,
                                                        BackendKind backend);

}  // namespace millipede
