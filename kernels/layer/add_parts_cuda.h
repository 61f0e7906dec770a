// CUDA form of AddPartsRef. Include only from CUDA-enabled translation units
// (MILLIPEDE_HAVE_CUDA builds); kernels/layer/add_parts.h stays CUDA-free.
#pragma once

#include <cuda_runtime.h>

#include "common/status.h"
#include "kernels/layer/add_parts.h"

namespace millipede {

// AddPartsRef on device memory, enqueued on `stream` (asynchronous), with the same fp32 sums in
// the same order: the reference's bits.
//   parts: [parts, m, n] F32 (parts part_stride apart); out: [m, n] F32.
Status AddPartsCuda(const AddPartsArgs& args, cudaStream_t stream);

}  // namespace millipede
