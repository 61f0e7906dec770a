// Whether this machine has a CUDA device: GPU suites skip themselves without one. CUDA builds
// only.
#pragma once

#include <cuda_runtime.h>

namespace millipede::testing {

inline bool HaveGpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

}  // namespace millipede::testing
