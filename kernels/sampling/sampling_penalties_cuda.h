// CUDA form of SamplingPenaltiesRef. Include only from CUDA-enabled translation units
// (MILLIPEDE_HAVE_CUDA builds); kernels/sampling/sampling_penalties.h stays CUDA-free.
#pragma once

#include <cuda_runtime.h>

#include "common/status.h"
#include "kernels/sampling/sampling_penalties.h"

namespace millipede {

// SamplingPenaltiesRef on device memory, enqueued on `stream` (asynchronous): one thread per id,
// the same double operations in the same order with round-to-nearest intrinsics (no contraction
// into fused multiply-adds), so the output is the reference's bit for bit. The tables are not
// checked for negative counts (the reference refuses them; here a negative count is used as
// given). `out` may be `logits`.
Status SamplingPenaltiesCuda(const SamplingPenaltiesArgs& args, cudaStream_t stream);

}  // namespace millipede
