#include "worker/backend/cuda_pinned_memory.h"

#include <cuda_runtime.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "worker/memory_plan.h"

namespace millipede {
namespace {

// Below this, cudaHostAlloc is quick enough and keeps small buffers off the mapping path.
constexpr size_t kRegisterBytes = size_t{256} << 20;
constexpr size_t kHugePage = size_t{2} << 20;
constexpr unsigned kMaxTouchThreads = 16;

bool DeviceUsesHostPointers() {
  int device = 0, flag = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&flag, cudaDevAttrCanUseHostPointerForRegisteredMem, device) !=
          cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return flag != 0;
}

Status Exhausted(size_t bytes, const Shape& shape, const std::string& why) {
  return ResourceExhaustedError("cannot allocate " + FormatBytes(static_cast<int64_t>(bytes)) +
                                " of page-locked host memory for a tensor " + shape.ToString() +
                                " (" + why + ")");
}

StatusOr<BackendTensor> HostAlloc(DType dtype, const Shape& shape, size_t bytes) {
  void* p = nullptr;
  // Mapped: kernels read it in place (GatherRows from a host KV tier). Portable: usable from
  // every device of the process.
  const cudaError_t err = cudaHostAlloc(&p, std::max<size_t>(bytes, 1),
                                        cudaHostAllocMapped | cudaHostAllocPortable);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Exhausted(bytes, shape, cudaGetErrorString(err));
  }
  return BackendTensor(TensorView{p, dtype, shape}, [](void* q) { cudaFreeHost(q); });
}

// Faults in [p, p + bytes) on several threads (the kernel zeroes each page as it maps it).
void TouchInParallel(char* p, size_t bytes) {
  const unsigned threads =
      std::clamp<unsigned>(std::thread::hardware_concurrency(), 1, kMaxTouchThreads);
  const size_t share = (bytes / threads + kHugePage - 1) / kHugePage * kHugePage;
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) {
    const size_t begin = std::min(bytes, t * share), end = std::min(bytes, begin + share);
    if (begin < end) workers.emplace_back([=] { std::memset(p + begin, 0, end - begin); });
  }
  for (std::thread& w : workers) w.join();
}

}  // namespace

StatusOr<BackendTensor> AllocatePinnedHost(DType dtype, const Shape& shape) {
  MP_ASSIGN_OR_RETURN(const size_t bytes, CheckedNumBytes(shape, dtype));
  static const bool register_large = DeviceUsesHostPointers();
  if (bytes < kRegisterBytes || !register_large) return HostAlloc(dtype, shape, bytes);
  const size_t mapped = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* raw = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return Exhausted(bytes, shape, "mmap failed");
  char* p = static_cast<char*>(raw);
  // A hint: without transparent huge pages the memory is still fine, only slower to fault in.
  madvise(p, mapped, MADV_HUGEPAGE);
  TouchInParallel(p, mapped);
  const cudaError_t err =
      cudaHostRegister(p, mapped, cudaHostRegisterMapped | cudaHostRegisterPortable);
  if (err != cudaSuccess) {
    cudaGetLastError();
    munmap(p, mapped);
    return Exhausted(bytes, shape, cudaGetErrorString(err));
  }
  return BackendTensor(TensorView{p, dtype, shape}, [mapped](void* q) {
    cudaHostUnregister(q);
    munmap(q, mapped);
  });
}

}  // namespace millipede
