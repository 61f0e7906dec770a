// Check macros for CUDA runtime and cuBLAS calls: failures become DeviceError statuses naming the
// expression, file and line. Include only from CUDA-enabled translation units.
#pragma once

#include <cuda_runtime.h>

#include "common/status.h"

#define MP_CUDA_CHECK(expr)                                                                    \
  do {                                                                                         \
    cudaError_t mp_cuda_err_ = (expr);                                                         \
    if (mp_cuda_err_ != cudaSuccess)                                                           \
      return ::millipede::DeviceError(::millipede::detail::StrCat(                             \
          "CUDA error ", cudaGetErrorName(mp_cuda_err_), " (", cudaGetErrorString(mp_cuda_err_), \
          ") in `" #expr "` at " __FILE__ ":", __LINE__));                                     \
  } while (0)

// Checks the last kernel launch.
#define MP_CUDA_CHECK_LAUNCH() MP_CUDA_CHECK(cudaGetLastError())
