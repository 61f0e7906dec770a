// The CUDA backend: device memory and the kernels' CUDA implementations, all queued on one stream
// (the calling thread's default stream, which the NCCL data plane orders itself against).
// CUDA builds only.
#pragma once

#include <memory>

#include "worker/backend/backend.h"

namespace millipede {

// Uses GPU `device` (cudaSetDevice) for everything the backend does.
StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device);

}  // namespace millipede
