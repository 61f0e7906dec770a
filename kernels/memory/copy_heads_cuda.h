// CUDA form of CopyHeadsRef. Include only from CUDA-enabled translation units
// (MILLIPEDE_HAVE_CUDA builds); kernels/memory/copy_heads.h stays CUDA-free.
#pragma once

#include <cuda_runtime.h>

#include "common/status.h"
#include "kernels/memory/copy_heads.h"

namespace millipede {

// CopyHeadsRef on the GPU, enqueued on `stream` (src and dst in device memory; the head lists
// travel as launch arguments).
Status CopyHeadsCuda(const CopyHeadsArgs& args, cudaStream_t stream);

}  // namespace millipede
