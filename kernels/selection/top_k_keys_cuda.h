// CUDA form of TopKKeysRef. Include only from CUDA-enabled translation units
// (MILLIPEDE_HAVE_CUDA builds); kernels/selection/top_k_keys.h stays CUDA-free.
#pragma once

#include <cuda_runtime.h>

#include "common/status.h"
#include "kernels/selection/top_k_keys.h"

namespace millipede {

// TopKKeysRef with index, value and keys in device memory (the ranges are arguments); enqueued
// on `stream` without waiting. The columns are not checked: a valid one gives the reference's
// key. One thread per entry.
Status TopKKeysCuda(const TopKKeysArgs& args, cudaStream_t stream);

}  // namespace millipede
