// Paged GPU memory for the CUDA backend's AllocatePaged (CUDA's virtual memory management): each
// chunk is a physical allocation (cuMemCreate) mapped at its place in the tensor's reserved
// address range; a shared chunk is the same allocation mapped again in another tensor's range.
// A chunk is freed once no range maps it. CUDA builds only.
#pragma once

#include "worker/backend/backend.h"

namespace millipede {

// The mapping granularity of GPU `device` in bytes (2 MiB on current GPUs); 0 when the device
// has no virtual memory management.
StatusOr<int64_t> DevicePageBytes(int device);
// ResourceExhausted for a tensor of `bytes` and `shape` GPU `device` cannot allocate, with its free
// memory.
Status GpuOutOfMemory(int device, size_t bytes, const Shape& shape);
// Backend::AllocatePaged on GPU `device` (its contract); `page` is DevicePageBytes(device).
StatusOr<BackendTensor> AllocatePagedDevice(int device, int64_t page, DType dtype,
                                            const Shape& shape, int64_t chunk_bytes,
                                            const BackendTensor* share, int64_t share_chunks);

}  // namespace millipede
