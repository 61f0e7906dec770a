#include "worker/dist/mpi_main.h"

#include <iostream>
#include <string>

namespace millipede {

StatusOr<int> NodeLocalRank(MPI_Comm comm) {
  int rank = 0;
  MP_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_Comm node;
  MP_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
  int local = 0;
  const int rc = MPI_Comm_rank(node, &local);
  MPI_Comm_free(&node);
  MP_MPI_CHECK(rc);
  return local;
}

bool InitMpi(const char* tool, int* argc, char*** argv, int required, int* provided) {
  int level = 0;
  if (MPI_Init_thread(argc, argv, required, &level) == MPI_SUCCESS) {
    if (provided != nullptr) *provided = level;
    return true;
  }
  std::cerr << tool << ": MPI initialisation failed\n";
  return false;
}

int RunMpiMain(const char* tool, int argc, char** argv,
               const std::function<Status(int argc, char** argv, const MpiWorld& world)>& run) {
  if (!InitMpi(tool, &argc, &argv)) return 1;
  MpiWorld world;
  MPI_Comm_rank(MPI_COMM_WORLD, &world.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world.size);
  const StatusOr<int> local_rank = NodeLocalRank(MPI_COMM_WORLD);
  if (local_rank.ok()) world.local_rank = *local_rank;
  const Status status = local_rank.ok() ? run(argc, argv, world) : local_rank.status();
  if (!status.ok()) {
    // One write, so that the ranks' lines do not interleave in mpirun's output.
    std::cerr << std::string(tool) +
                     (world.size > 1 ? " rank " + std::to_string(world.rank) : std::string()) +
                     ": " + status.ToString() + "\n";
    if (world.size > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Finalize();
    return 1;
  }
  MPI_Finalize();
  return 0;
}

}  // namespace millipede
