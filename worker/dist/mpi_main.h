// The MPI set-up of the tools whose ranks share one job under mpirun (millipede-run,
// millipede-quality, millipede-bench-e2e): one place for initialisation, the rank's place in the
// world, and what a failure does to the other ranks. millipede-worker shares the pieces.
#pragma once

#include <functional>

#include "common/mpi_check.h"
#include "common/status.h"

namespace millipede {

// This process's place among the ranks of MPI_COMM_WORLD.
struct MpiWorld {
  int rank = 0;
  int size = 1;
  int local_rank = 0;  // among the ranks on this node: picks the GPU
};

// This process's rank among the ranks of `comm` on the same node.
StatusOr<int> NodeLocalRank(MPI_Comm comm);

// MPI_Init_thread asking for `required` (by default MPI_THREAD_FUNNELED: the thread calling it
// makes every MPI call); `*provided`, when set, receives the level MPI gives. On failure prints
// "<tool>: MPI initialisation failed" and returns false.
bool InitMpi(const char* tool, int* argc, char*** argv, int required = MPI_THREAD_FUNNELED,
             int* provided = nullptr);

// The body of a tool's main(): initialises MPI, runs `run` with this process's MpiWorld and
// finalizes MPI. A failure, of the set-up or of `run`, is printed as "<tool>: <status>" ("<tool>
// rank R: ..." with several ranks), and with several ranks the job is aborted: every rank meets
// input errors on its own (same flags, same input), and the abort keeps a rank-local failure
// from leaving another rank waiting in a collective. Returns main's exit status, 0 or 1.
int RunMpiMain(const char* tool, int argc, char** argv,
               const std::function<Status(int argc, char** argv, const MpiWorld& world)>& run);

}  // namespace millipede
