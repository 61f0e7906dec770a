// The CPU backend: host memory and the kernels' reference implementations. Exact, slow, and the
// oracle every other backend is checked against.
#pragma once

#include <memory>

#include "worker/backend.h"

namespace millipede {

std::unique_ptr<Backend> CreateCpuBackend();

}  // namespace millipede
