// CUDA entry point of kernels/memory/convert.h. Include only from CUDA builds.
#pragma once

#include <cuda_runtime.h>

#include "kernels/memory/convert.h"

namespace millipede {

// ConvertRef on device memory, queued on `stream`.
Status ConvertCuda(ConstTensorView src, TensorView dst, cudaStream_t stream);

}  // namespace millipede
