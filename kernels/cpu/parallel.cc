#include "kernels/cpu/parallel.h"

#include <cblas.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

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

// One loop handed to the pool. Items are claimed through `next`; the caller returns once `done`
// reaches n. A helper that wakes after the last item was claimed claims nothing and never calls
// `body` (which may be gone by then); the shared_ptr keeps the counters alive for it.
struct Job {
  const std::function<void(int64_t)>* body;
  int64_t n;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};

  // Runs items until none is left; returns how many this thread ran.
  int64_t Work() {
    int64_t ran = 0;
    for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1), ++ran) (*body)(i);
    return ran;
  }
};

thread_local bool in_pool_job = false;

// Helper threads that sleep until a loop arrives (no spinning: on a machine shared with other
// processes a spinning helper takes the CPU the caller needs). The caller works on its own loop
// too and waits only for items a helper has claimed, never for a helper that has not woken up,
// so a descheduled helper costs nothing.
class Pool {
 public:
  explicit Pool(int helpers) {
    for (int t = 0; t < helpers; ++t) threads_.emplace_back([this] { HelperLoop(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  // Runs the loop on the caller and the helpers; false (nothing run) when another thread's loop
  // holds the pool.
  bool TryRun(int64_t n, const std::function<void(int64_t)>& body) {
    std::unique_lock<std::mutex> busy(run_mutex_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    auto job = std::make_shared<Job>();
    job->body = &body;
    job->n = n;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = job;
      ++generation_;
    }
    wake_.notify_all();
    in_pool_job = true;
    const int64_t mine = job->Work();
    in_pool_job = false;
    if (job->done.fetch_add(mine) + mine < n) {
      for (int64_t d = job->done.load(); d < n; d = job->done.load()) job->done.wait(d);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    job_.reset();
    return true;
  }

 private:
  void HelperLoop() {
    uint64_t seen = 0;
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        job = job_;
      }
      if (job == nullptr) continue;
      in_pool_job = true;
      const int64_t ran = job->Work();
      in_pool_job = false;
      if (ran > 0) {
        job->done.fetch_add(ran);
        job->done.notify_all();
      }
    }
  }

  std::mutex run_mutex_;  // one loop at a time
  std::mutex mutex_;      // guards job_, generation_, stop_
  std::condition_variable wake_;
  std::shared_ptr<Job> job_;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

Pool& ThePool() {
  static Pool pool(CpuThreads() - 1);
  return pool;
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
  if (n <= 0) return;
  if (n == 1 || CpuThreads() == 1 || work < kParallelMinWork || in_pool_job ||
      !ThePool().TryRun(n, body)) {
    for (int64_t i = 0; i < n; ++i) body(i);
  }
}

}  // namespace millipede::cpu
