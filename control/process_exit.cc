#include "control/process_exit.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "common/mpi_check.h"

namespace millipede::control {
namespace {

std::string ParentCommand() {
  std::ifstream in("/proc/" + std::to_string(getppid()) + "/comm");
  std::string name;
  std::getline(in, name);
  return name;
}

}  // namespace

bool LauncherHidesFailures(const char* recovery_env, const std::string& parent_command) {
  if (recovery_env == nullptr) return false;
  const std::string value = recovery_env;
  if (value != "1" && value != "true" && value != "yes") return false;
  // Only OpenMPI's own launcher processes: never a shell, srun's step daemon or a supervisor.
  return parent_command == "mpirun" || parent_command == "mpiexec" ||
         parent_command == "orterun" || parent_command == "orted";
}

bool SignalLauncherIfItHidesFailures() {
  if (!LauncherHidesFailures(std::getenv("OMPI_MCA_orte_enable_recovery"), ParentCommand()))
    return false;
  return kill(getppid(), SIGTERM) == 0;
}

void AbortJob(int code) {
  SignalLauncherIfItHidesFailures();
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort returned (it should not)
}

void ExitNow(int code) {
  SignalLauncherIfItHidesFailures();
  std::_Exit(code);
}

}  // namespace millipede::control
