// millipede-bench-host-memory: the host memory a host KV tier could live in, measured on a CUDA
// machine, and prints one JSON object. Two kinds of memory: anonymous memory with transparent
// huge pages (what AllocateHost maps for a large host tier) and an in-memory file (what pages
// that two mappings share need, as the GPU's shared KV blocks are shared). For each: faulting it
// in on 16 threads and pinning it for the device (cudaHostRegister), and gathering random rows of
// one KV head from it on the copy queue (OmniKV's loads); for the file, a second mapping of it
// pinned (what a job sharing its pages would pay); and host-to-host copies of the whole buffer by
// the copy engine and by ParallelCopy on 1 to 16 threads. Seconds (or GB/s where named).
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/cuda_check.h"
#include "common/flags.h"
#include "common/parallel_copy.h"
#include "worker/backend/backend.h"
#include "worker/backend/backend_factory.h"

namespace millipede {
namespace {

constexpr char kUsage[] = R"(usage: millipede-bench-host-memory [options]

  --gib G        bytes of each buffer, in GiB (default 16)
  --row-bytes B  bytes of one gathered row (default 256: head_dim 128 in bf16)
  --rows N       rows per gather (default 1048576: 2048 tokens x 8 heads x K and V x 32 layers)
)";

constexpr size_t kGiB = size_t{1} << 30;
constexpr size_t kMapUnit = size_t{256} << 20;  // the file is mapped in pieces of this
constexpr unsigned kThreads = 16;

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// f(offset, bytes) for every kMapUnit piece of [0, bytes), on kThreads threads.
template <class F>
void ForPieces(size_t bytes, F f) {
  std::vector<std::thread> workers;
  const size_t pieces = (bytes + kMapUnit - 1) / kMapUnit;
  for (unsigned t = 0; t < kThreads; ++t)
    workers.emplace_back([=] {
      for (size_t p = t; p < pieces; p += kThreads)
        f(p * kMapUnit, std::min(kMapUnit, bytes - p * kMapUnit));
    });
  for (std::thread& w : workers) w.join();
}

// `bytes` of memory file `fd` mapped (populated) at new addresses, in pieces on kThreads threads,
// allocating the file's pages first with `allocate`.
StatusOr<char*> MapFile(int fd, size_t bytes, bool allocate) {
  void* reserved =
      mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  MP_REQUIRE(reserved != MAP_FAILED, "cannot reserve ", bytes, " bytes of addresses");
  char* base = static_cast<char*>(reserved);
  std::atomic<int64_t> failed{0};
  ForPieces(bytes, [&](size_t at, size_t n) {
    const auto offset = static_cast<off_t>(at);
    if ((allocate && fallocate(fd, 0, offset, static_cast<off_t>(n)) != 0) ||
        mmap(base + at, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_POPULATE, fd,
             offset) == MAP_FAILED)
      ++failed;
  });
  if (failed > 0) {
    munmap(base, bytes);
    return ResourceExhaustedError("the memory file: " + std::to_string(failed.load()) +
                                  " pieces could not be allocated or mapped");
  }
  return base;
}

Status Register(void* p, size_t bytes) {
  MP_CUDA_CHECK(cudaHostRegister(p, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable));
  return OkStatus();
}

// Rows gathered per second from `host` (registered) into device memory, on the copy queue.
StatusOr<double> GatherGBps(Backend& b, const char* host, size_t bytes, int64_t row_bytes,
                            int64_t rows) {
  const int64_t width = row_bytes / 2, total = static_cast<int64_t>(bytes) / row_bytes;
  std::vector<int64_t> picked(static_cast<size_t>(rows));
  std::mt19937_64 random(1);
  for (int64_t& r : picked) r = static_cast<int64_t>(random() % static_cast<uint64_t>(total));
  MP_ASSIGN_OR_RETURN(BackendTensor index, b.Allocate(DType::kI64, {rows}));
  MP_RETURN_IF_ERROR(b.CopyFromHost({picked.data(), DType::kI64, {rows}}, index.view()));
  MP_ASSIGN_OR_RETURN(BackendTensor dst, b.Allocate(DType::kBF16, {rows, width}));
  const ConstTensorView src{host, DType::kBF16, {total, width}};
  const int kWarmup = 2, kIters = 10;
  CopyEvent last;
  for (int i = 0; i < kWarmup; ++i) {
    MP_ASSIGN_OR_RETURN(last, b.StartGatherRows({src, index.cview(), dst.view()}, CopyOrder::kNow));
  }
  MP_RETURN_IF_ERROR(b.WaitCopy(last));
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kIters; ++i) {
    MP_ASSIGN_OR_RETURN(last, b.StartGatherRows({src, index.cview(), dst.view()}, CopyOrder::kNow));
  }
  MP_RETURN_IF_ERROR(b.WaitCopy(last));
  return static_cast<double>(rows * row_bytes) * kIters / Seconds(t0) / 1e9;
}

Status Run(int argc, char** argv) {
  MP_ASSIGN_OR_RETURN(const Flags flags, Flags::Parse(argc, argv, {"help"}));
  if (flags.GetBool("help")) {
    std::cout << kUsage;
    return OkStatus();
  }
  MP_RETURN_IF_ERROR(flags.CheckKnown({"help", "gib", "row-bytes", "rows"}));
  MP_ASSIGN_OR_RETURN(const int64_t gib, flags.GetInt("gib", 16));
  MP_ASSIGN_OR_RETURN(const int64_t row_bytes, flags.GetInt("row-bytes", 256));
  MP_ASSIGN_OR_RETURN(const int64_t rows, flags.GetInt("rows", 1048576));
  MP_REQUIRE(gib > 0 && row_bytes > 0 && row_bytes % 16 == 0 && rows > 0, "bad sizes (--help)");
  const size_t bytes = static_cast<size_t>(gib) * kGiB;
  MP_ASSIGN_OR_RETURN(std::unique_ptr<Backend> b, CreateBackend(BackendKind::kCuda, 0));
  nlohmann::json out{{"bench", "host-memory"}, {"gib", gib}};

  // Anonymous memory, transparent huge pages asked for.
  auto t0 = std::chrono::steady_clock::now();
  void* anon = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  MP_REQUIRE(anon != MAP_FAILED, "mmap of ", bytes, " bytes failed");
  char* a = static_cast<char*>(anon);
  madvise(a, bytes, MADV_HUGEPAGE);
  ForPieces(bytes, [&](size_t at, size_t n) { std::memset(a + at, 1, n); });
  out["anonymous"]["fault_in_s"] = Seconds(t0);
  t0 = std::chrono::steady_clock::now();
  MP_RETURN_IF_ERROR(Register(a, bytes));
  out["anonymous"]["pin_s"] = Seconds(t0);
  MP_ASSIGN_OR_RETURN(out["anonymous"]["gather_gbps"], GatherGBps(*b, a, bytes, row_bytes, rows));

  // An in-memory file, allocated and mapped (populated) in pieces on 16 threads.
  t0 = std::chrono::steady_clock::now();
  const int fd = memfd_create("millipede-bench", MFD_CLOEXEC);
  MP_REQUIRE(fd >= 0 && ftruncate(fd, static_cast<off_t>(bytes)) == 0, "no memory file");
  MP_ASSIGN_OR_RETURN(char* f, MapFile(fd, bytes, /*allocate=*/true));
  out["file"]["fault_in_s"] = Seconds(t0);
  t0 = std::chrono::steady_clock::now();
  MP_RETURN_IF_ERROR(Register(f, bytes));
  out["file"]["pin_s"] = Seconds(t0);
  MP_ASSIGN_OR_RETURN(out["file"]["gather_gbps"], GatherGBps(*b, f, bytes, row_bytes, rows));

  // A second mapping of the file's pages: what sharing them with another job costs.
  t0 = std::chrono::steady_clock::now();
  MP_ASSIGN_OR_RETURN(char* s, MapFile(fd, bytes, /*allocate=*/false));
  out["file"]["second_mapping_s"] = Seconds(t0);
  t0 = std::chrono::steady_clock::now();
  MP_RETURN_IF_ERROR(Register(s, bytes));
  out["file"]["second_mapping_pin_s"] = Seconds(t0);
  MP_REQUIRE(s[12345] == f[12345], "the second mapping shows other bytes");

  // Host-to-host copies of the whole buffer, file -> anonymous.
  t0 = std::chrono::steady_clock::now();
  MP_CUDA_CHECK(cudaMemcpy(a, f, bytes, cudaMemcpyHostToHost));
  out["copy_gbps"]["copy_engine"] = static_cast<double>(bytes) / Seconds(t0) / 1e9;
  for (const unsigned threads : {1u, 4u, 8u, 16u}) {
    t0 = std::chrono::steady_clock::now();
    ParallelCopy(a, f, bytes, threads);
    out["copy_gbps"]["threads_" + std::to_string(threads)] =
        static_cast<double>(bytes) / Seconds(t0) / 1e9;
  }
  for (char* p : {a, f, s}) {
    cudaHostUnregister(p);
    munmap(p, bytes);
  }
  close(fd);
  std::cout << out.dump(2) << "\n";
  return OkStatus();
}

}  // namespace
}  // namespace millipede

int main(int argc, char** argv) {
  const millipede::Status status = millipede::Run(argc, argv);
  if (!status.ok()) {
    std::cerr << "millipede-bench-host-memory: " << status.ToString() << "\n";
    return 1;
  }
  return 0;
}
