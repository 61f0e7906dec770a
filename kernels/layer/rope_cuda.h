// CUDA form of RopeRef. Include only from CUDA-enabled translation units (MILLIPEDE_HAVE_CUDA
// builds); kernels/layer/rope.h stays CUDA-free.
#pragma once

#include <cuda_runtime.h>

#include "common/status.h"
#include "kernels/layer/rope.h"

namespace millipede {

// RopeRef on device memory, enqueued on `stream` (asynchronous): x is rotated in place. The angle
// is the same fp32 product float(position) * inv_freq[i]; its cos and sin come from the precise
// (not fast-math) sincosf, within 2 ulp of the reference's correctly rounded values.
//   x [n, num_heads, head_dim] F32, positions [n] I64, inv_freq [head_dim / 2] F32.
Status RopeCuda(const RopeArgs& args, cudaStream_t stream);

}  // namespace millipede
