// CUDA form of MergeStateRef. Include only from CUDA-enabled translation units
// (MILLIPEDE_HAVE_CUDA builds); kernels/merge_state.h stays CUDA-free.
#pragma once

#include <cuda_runtime.h>

#include "common/status.h"
#include "kernels/merge_state.h"

namespace millipede {

// Same contract as MergeStateRef, with every tensor in device memory; enqueued on `stream`
// (asynchronous: errors in the kernel itself surface at the next synchronisation). Shapes and
// dtypes are checked on the host; lse values are not (NaN or +inf parts give NaN rows).
Status MergeStateCuda(const MergeStateArgs& args, cudaStream_t stream);

}  // namespace millipede
