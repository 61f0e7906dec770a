#include "worker/backend/cuda_paged_memory.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include <string>

namespace millipede {
namespace {

// The driver's virtual memory calls, found through the runtime (the engine links the runtime
// only: a machine without a GPU driver still loads it).
struct Driver {
  decltype(&::cuGetErrorName) GetErrorName = nullptr;
  decltype(&::cuDeviceGet) DeviceGet = nullptr;
  decltype(&::cuDeviceGetAttribute) DeviceGetAttribute = nullptr;
  decltype(&::cuMemGetAllocationGranularity) MemGetAllocationGranularity = nullptr;
  decltype(&::cuMemAddressReserve) MemAddressReserve = nullptr;
  decltype(&::cuMemAddressFree) MemAddressFree = nullptr;
  decltype(&::cuMemCreate) MemCreate = nullptr;
  decltype(&::cuMemRelease) MemRelease = nullptr;
  decltype(&::cuMemMap) MemMap = nullptr;
  decltype(&::cuMemUnmap) MemUnmap = nullptr;
  decltype(&::cuMemSetAccess) MemSetAccess = nullptr;
  bool ok = false;
};

template <class F>
bool Find(const char* symbol, F* fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(symbol, &p, 12000, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess || p == nullptr) {
    cudaGetLastError();
    return false;
  }
  *fn = reinterpret_cast<F>(p);
  return true;
}

const Driver& Cu() {
  static const Driver driver = [] {
    Driver d;
    d.ok = Find("cuGetErrorName", &d.GetErrorName) && Find("cuDeviceGet", &d.DeviceGet) &&
           Find("cuDeviceGetAttribute", &d.DeviceGetAttribute) &&
           Find("cuMemGetAllocationGranularity", &d.MemGetAllocationGranularity) &&
           Find("cuMemAddressReserve", &d.MemAddressReserve) &&
           Find("cuMemAddressFree", &d.MemAddressFree) && Find("cuMemCreate", &d.MemCreate) &&
           Find("cuMemRelease", &d.MemRelease) && Find("cuMemMap", &d.MemMap) &&
           Find("cuMemUnmap", &d.MemUnmap) && Find("cuMemSetAccess", &d.MemSetAccess);
    return d;
  }();
  return driver;
}

Status DriverError(CUresult r, const char* what) {
  const char* name = nullptr;
  Cu().GetErrorName(r, &name);
  const std::string text = std::string("paged GPU memory: ") + what + " failed (" +
                           (name != nullptr ? name : "unknown error") + ")";
  return r == CUDA_ERROR_OUT_OF_MEMORY ? ResourceExhaustedError(text) : DeviceError(text);
}

#define MP_CU_CHECK(expr, what)                                       \
  do {                                                                \
    const CUresult mp_cu_r_ = (expr);                                 \
    if (mp_cu_r_ != CUDA_SUCCESS) return DriverError(mp_cu_r_, what); \
  } while (0)

CUmemAllocationProp DeviceProp(int device) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

class DeviceChunk final : public MemoryChunk {
 public:
  DeviceChunk(CUmemGenericAllocationHandle handle, int64_t n) : handle_(handle) { bytes = n; }
  // Unmapped everywhere (PagedMemory unmaps first): the allocation is freed.
  ~DeviceChunk() override { Cu().MemRelease(handle_); }
  CUmemGenericAllocationHandle handle() const { return handle_; }

 private:
  CUmemGenericAllocationHandle handle_;
};

// A tensor's reserved address range and the chunks mapped in it.
class DevicePagedMemory final : public PagedMemory {
 public:
  DevicePagedMemory(CUdeviceptr base, int64_t total) : base_(base), total_(total) {}
  ~DevicePagedMemory() {
    // As cudaFree does: nothing still queued may touch the memory once it is unmapped.
    cudaDeviceSynchronize();
    CUdeviceptr at = base_;
    for (int64_t i = 0; i < mapped_; ++i) {
      Cu().MemUnmap(at, static_cast<size_t>(chunks[static_cast<size_t>(i)]->bytes));
      at += static_cast<CUdeviceptr>(chunks[static_cast<size_t>(i)]->bytes);
    }
    Cu().MemAddressFree(base_, static_cast<size_t>(total_));
  }
  DevicePagedMemory(const DevicePagedMemory&) = delete;
  DevicePagedMemory& operator=(const DevicePagedMemory&) = delete;
  CUdeviceptr base() const { return base_; }
  // Maps `chunk` after the ones mapped so far.
  Status Map(std::shared_ptr<const MemoryChunk> chunk) {
    const auto* c = dynamic_cast<const DeviceChunk*>(chunk.get());
    if (c == nullptr) return InvalidArgumentError("paged GPU memory: a chunk of another backend");
    MP_CU_CHECK(Cu().MemMap(base_ + static_cast<CUdeviceptr>(at_), static_cast<size_t>(c->bytes), 0,
                            c->handle(), 0),
                "cuMemMap");
    chunks.push_back(std::move(chunk));
    at_ += chunks.back()->bytes;
    ++mapped_;
    return OkStatus();
  }

 private:
  CUdeviceptr base_;
  int64_t total_;
  int64_t at_ = 0;
  int64_t mapped_ = 0;
};

}  // namespace

Status GpuOutOfMemory(int device, size_t bytes, const Shape& shape) {
  size_t free_bytes = 0, total = 0;
  cudaMemGetInfo(&free_bytes, &total);
  return ResourceExhaustedError("GPU " + std::to_string(device) + ": cannot allocate " +
                                std::to_string(bytes) + " bytes for a tensor " +
                                shape.ToString() + " (" + std::to_string(free_bytes) +
                                " bytes free)");
}

StatusOr<int64_t> DevicePageBytes(int device) {
  CUdevice dev;
  if (!Cu().ok) return int64_t{0};
  MP_CU_CHECK(Cu().DeviceGet(&dev, device), "cuDeviceGet");
  int vmm = 0;
  MP_CU_CHECK(
      Cu().DeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev),
      "cuDeviceGetAttribute");
  if (vmm == 0) return int64_t{0};
  const CUmemAllocationProp prop = DeviceProp(device);
  size_t granularity = 0;
  MP_CU_CHECK(
      Cu().MemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
      "cuMemGetAllocationGranularity");
  return static_cast<int64_t>(granularity);
}

StatusOr<BackendTensor> AllocatePagedDevice(int device, int64_t page, DType dtype,
                                            const Shape& shape, int64_t chunk_bytes,
                                            const BackendTensor* share, int64_t share_chunks) {
  MP_ASSIGN_OR_RETURN(const size_t bytes, CheckedNumBytes(shape, dtype));
  MP_ASSIGN_OR_RETURN(PagedPlan plan, PlanPaged(static_cast<int64_t>(bytes), page, chunk_bytes,
                                                share, share_chunks));
  CUdeviceptr base = 0;
  MP_CU_CHECK(Cu().MemAddressReserve(&base, static_cast<size_t>(plan.total), 0, 0, 0),
              "cuMemAddressReserve");
  auto memory = std::make_shared<DevicePagedMemory>(base, plan.total);
  for (auto& c : plan.shared) MP_RETURN_IF_ERROR(memory->Map(std::move(c)));
  const CUmemAllocationProp prop = DeviceProp(device);
  for (const int64_t n : plan.new_bytes) {
    CUmemGenericAllocationHandle handle;
    const CUresult r = Cu().MemCreate(&handle, static_cast<size_t>(n), &prop, 0);
    if (r != CUDA_SUCCESS) return GpuOutOfMemory(device, bytes, shape);
    MP_RETURN_IF_ERROR(memory->Map(std::make_shared<DeviceChunk>(handle, n)));
  }
  CUmemAccessDesc access = {};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  MP_CU_CHECK(Cu().MemSetAccess(base, static_cast<size_t>(plan.total), &access, 1),
              "cuMemSetAccess");
  const TensorView view{reinterpret_cast<void*>(base), dtype, shape};
  return BackendTensor(view, nullptr, std::move(memory));
}

}  // namespace millipede
