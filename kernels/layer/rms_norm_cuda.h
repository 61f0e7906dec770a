// CUDA form of RmsNormRef. Include only from CUDA-enabled translation units
// (MILLIPEDE_HAVE_CUDA builds); kernels/layer/rms_norm.h stays CUDA-free.
#pragma once

#include <cuda_runtime.h>

#include "common/status.h"
#include "kernels/layer/rms_norm.h"

namespace millipede {

// RmsNormRef (with or without the fused residual add) on device memory, enqueued on `stream`
// (asynchronous). Same aliasing rules: an F32 `out` may be `x` or `residual`. The mean of squares
// is an fp32 block reduction (the reference sums in double), so results agree to a few fp32 ulps;
// a BF16/F16 `out` holds this kernel's F32 result rounded to nearest even (bit for bit what
// ConvertCuda of its F32 output gives).
//   x [n, hidden] F32, weight [hidden] F32/BF16/F16/F64, residual (optional) [n, hidden] F32,
//   out [n, hidden] F32, BF16 or F16.
Status RmsNormCuda(const RmsNormArgs& args, cudaStream_t stream);

}  // namespace millipede
