// Page-locked host memory for the CUDA backend's AllocateHost: the host KV tier takes tens of GiB
// at once, which cudaHostAlloc faults in, zeroes and pins page by page on one thread. Large
// blocks are instead mapped anonymously (transparent huge pages requested), faulted in by
// several threads at once, and then page-locked and mapped for the device in one
// cudaHostRegister call; small ones, and devices that cannot use a registered block's host
// pointer, take cudaHostAlloc. Either way the host pointer is valid in kernels (mapped memory)
// and in asynchronous copies. CUDA builds only.
#pragma once

#include "worker/backend/backend.h"

namespace millipede {

// Pinned, mapped, portable host memory for a tensor of `shape`, uninitialised. ResourceExhausted,
// with the size, when the host cannot give it.
StatusOr<BackendTensor> AllocatePinnedHost(DType dtype, const Shape& shape);

}  // namespace millipede
