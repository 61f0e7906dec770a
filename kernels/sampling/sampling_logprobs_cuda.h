// CUDA form of SamplingLogprobsRef. Include only from CUDA-enabled translation units
// (MILLIPEDE_HAVE_CUDA builds); kernels/sampling/sampling_logprobs.h stays CUDA-free.
#pragma once

#include <cuda_runtime.h>

#include "common/status.h"
#include "kernels/sampling/sampling_logprobs.h"
#include "kernels/selection/top_k_cuda.h"

namespace millipede {

// SamplingLogprobsRef on device memory, enqueued on `stream` (asynchronous): TopKCuda over the
// logits as one row gives the ids and their logits (the same selection and order as the
// reference, bit for bit), then one block computes lse in double and subtracts it. Only the
// order of the double sum differs from the reference, so a log-probability may differ in its
// last bit. The logits' values are not checked (NaN or +inf give NaN log-probabilities).
Status SamplingLogprobsCuda(const SamplingLogprobsArgs& args, TopKCudaWorkspace& top_k,
                            cudaStream_t stream);

}  // namespace millipede
