#include "kernels/cpu/parallel.h"

#include <cblas.h>
#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

namespace millipede::cpu {
namespace {

// A positive integer from the environment, or 0 when unset or not one.
int EnvInt(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr) return 0;
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  return end != text && *end == '\0' && v > 0 && v < (1 << 20) ? static_cast<int>(v) : 0;
}

int DecideThreads() {
  if (const int forced = EnvInt("MILLIPEDE_CPU_THREADS"); forced > 0) return forced;
  const int machine = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  int allowed = machine;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) allowed = std::max(1, CPU_COUNT(&set));
  // A launcher that binds each rank to its own CPUs has already shared the machine out (the
  // affinity mask); one that binds several ranks to the same CPUs, or none, has not.
  int ranks_here = EnvInt("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (ranks_here == 0) ranks_here = EnvInt("MPI_LOCALNRANKS");
  const int share = std::max(1, machine / std::max(1, ranks_here));
  return std::max(1, std::min(allowed, share));
}

}  // namespace

int CpuThreads() {
  static const int threads = DecideThreads();
  return threads;
}

void UseSingleThreadedBlas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

void ParallelFor(int64_t n, double work, const std::function<void(int64_t)>& body) {
  UseSingleThreadedBlas();
  const int threads = static_cast<int>(std::min<int64_t>(CpuThreads(), n));
  if (threads <= 1 || work < kParallelMinWork || omp_in_parallel()) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t i = 0; i < n; ++i) body(i);
}

}  // namespace millipede::cpu
