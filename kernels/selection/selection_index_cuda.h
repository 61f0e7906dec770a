// CUDA form of SelectionIndexRef. Include only from CUDA-enabled translation units
// (MILLIPEDE_HAVE_CUDA builds); kernels/selection/selection_index.h stays CUDA-free.
#pragma once

#include <cuda_runtime.h>

#include "common/status.h"
#include "kernels/selection/selection_index.h"

namespace millipede {

// SelectionIndexRef with every tensor in device memory; enqueued on `stream` without waiting.
// Shapes are checked on the host; the entries are not (valid ones give the reference's output).
// One thread per (slot, KV head), writing its entry of every block (consecutive threads write
// consecutive entries); the thread of a head's last chosen row writes its count.
Status SelectionIndexCuda(const SelectionIndexArgs& args, cudaStream_t stream);

}  // namespace millipede
