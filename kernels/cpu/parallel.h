// Threads of the CPU backend's kernels (kernels/cpu/): how many, and a parallel loop over work
// items. One pool of threads for every op; OpenBLAS runs single-threaded inside it, so the two
// never oversubscribe the machine.
#pragma once

#include <cstdint>
#include <functional>

namespace millipede::cpu {

// Threads a kernel may use, decided once per process: MILLIPEDE_CPU_THREADS when set (>= 1);
// otherwise the CPUs this process may run on (its affinity mask), but no more than the machine's
// CPUs divided among the MPI ranks on this node (OMPI_COMM_WORLD_LOCAL_SIZE or MPI_LOCALNRANKS),
// so that ranks sharing a machine do not oversubscribe it. At least 1.
int CpuThreads();

// Below this much work (in float operations) a loop runs on the calling thread: waking the other
// threads would cost more than it saves, and small models (tests) keep one busy core.
inline constexpr double kParallelMinWork = 2e5;

// Calls body(i) for every i in [0, n), on the calling thread and up to CpuThreads() - 1 pool
// threads, each taking the next unclaimed item (items may differ in cost, as causal attention's
// do: give the costly ones first). `work` estimates the whole loop's cost (see
// kParallelMinWork). body must not throw; it may call BLAS (single-threaded) and ParallelFor
// (which then runs serially, as does a loop started while another thread's loop holds the pool).
void ParallelFor(int64_t n, double work, const std::function<void(int64_t)>& body);

// Makes OpenBLAS single-threaded (once per process); ParallelFor calls it. Kernels that call BLAS
// outside ParallelFor call it first.
void UseSingleThreadedBlas();

}  // namespace millipede::cpu
