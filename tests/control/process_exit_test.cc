#include "control/process_exit.h"

#include <gtest/gtest.h>

namespace millipede::control {
namespace {

TEST(ProcessExitTest, OnlyOpenMpiLaunchersWithRecoveryAreSignalled) {
  EXPECT_TRUE(LauncherHidesFailures("1", "mpirun"));
  EXPECT_TRUE(LauncherHidesFailures("true", "mpiexec"));
  EXPECT_TRUE(LauncherHidesFailures("1", "orted"));
  EXPECT_TRUE(LauncherHidesFailures("1", "orterun"));
  // Without --enable-recovery mpirun reports a failed rank itself.
  EXPECT_FALSE(LauncherHidesFailures(nullptr, "mpirun"));
  EXPECT_FALSE(LauncherHidesFailures("0", "mpirun"));
  EXPECT_FALSE(LauncherHidesFailures("false", "orted"));
  // Any other parent (srun's step daemon, a shell, a supervisor) is never signalled.
  EXPECT_FALSE(LauncherHidesFailures("1", "slurmstepd"));
  EXPECT_FALSE(LauncherHidesFailures("1", "bash"));
  EXPECT_FALSE(LauncherHidesFailures("1", "supervise.sh"));
  EXPECT_FALSE(LauncherHidesFailures("1", ""));
}

TEST(ProcessExitTest, ExitCodesAreDistinctAndStable) {
  // Documented in docs/operations.md ("Exit codes"); scripts key on them.
  EXPECT_EQ(kExitOk, 0);
  EXPECT_EQ(kExitStartFailed, 1);
  EXPECT_EQ(kExitBadLaunch, 2);
  EXPECT_EQ(kExitFailedWhileServing, 3);
}

}  // namespace
}  // namespace millipede::control
