// How the service's processes end after a failure, and the exit statuses they end with.
//
// OpenMPI 4.1's `mpirun --enable-recovery` (which lets the coordinator tell its clients about a
// dead worker before the job ends) exits 0 whatever its ranks did, even after MPI_Abort. So a
// rank that ends the job under it also sends SIGTERM to its launcher (mpirun, or the node's
// orted), which then ends every rank and exits non-zero, as it does without --enable-recovery,
// and as srun reports the tasks' statuses.
#pragma once

#include <string>

namespace millipede::control {

// AbortJob and ExitNow end the process: only a tool's main() (and a thread it starts for that
// purpose, such as the worker's heartbeat) may call them; library code returns a Status.

// Exit statuses of millipede-coordinator and millipede-worker (docs/operations.md, "Exit codes").
enum ExitCode : int {
  kExitOk = 0,                 // stopped on request (drained) or --help
  kExitStartFailed = 1,        // could not start: flags, model, ports, a worker's start failure
  kExitBadLaunch = 2,          // the ranks are not laid out as one coordinator first, then workers
  kExitFailedWhileServing = 3, // a rank lost, the coordinator lost, a stalled step that did not
                               // stop, the control plane broken, or told to stop after one of these
};

// Whether a failing rank must signal its launcher for the failure to show in the launcher's
// exit status: `recovery_env` is $OMPI_MCA_orte_enable_recovery (null when unset) and
// `parent_command` the parent process's command name (/proc/PPID/comm).
bool LauncherHidesFailures(const char* recovery_env, const std::string& parent_command);

// Signals the launcher (SIGTERM to the parent) when LauncherHidesFailures says so. Returns
// whether it did.
bool SignalLauncherIfItHidesFailures();

// Ends the whole MPI job with `code`: signals a launcher that would hide it, then MPI_Abort.
[[noreturn]] void AbortJob(int code);

// Ends this process at once with `code`, from any thread (the main one may be blocked inside
// MPI): signals a launcher that would hide it, then _Exit.
[[noreturn]] void ExitNow(int code);

}  // namespace millipede::control
