// The one place that knows every backend: makes a Backend of a given kind. Callers program
// against backend.h alone; only this file's implementation includes the concrete backends.
#pragma once

#include <memory>

#include "common/status.h"
#include "worker/backend/backend.h"

namespace millipede {

// Creates a backend (`device`: the GPU index for kCuda). kCuda is refused with a clear error in
// builds without CUDA.
StatusOr<std::unique_ptr<Backend>> CreateBackend(BackendKind kind, int device = 0);

}  // namespace millipede
