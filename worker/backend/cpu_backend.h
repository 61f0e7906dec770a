// The CPU backend: host memory and the threaded, vectorised kernels of kernels/cpu/ (OpenBLAS
// GEMMs, blocked attention), each checked against its reference in kernels/*_ref.cc, which stays
// the oracle every backend is tested against. Sampling runs the reference.
#pragma once

#include <memory>

#include "worker/backend/backend.h"

namespace millipede {

std::unique_ptr<Backend> CreateCpuBackend();

}  // namespace millipede
