// CUDA form of RopeKvRef. Include only from CUDA-enabled translation units (MILLIPEDE_HAVE_CUDA
// builds); kernels/layer/rope_kv.h stays CUDA-free.
#pragma once

#include <cuda_runtime.h>

#include "common/status.h"
#include "kernels/layer/rope_kv.h"

namespace millipede {

// RopeKvRef on device memory in one launch, enqueued on `stream` (asynchronous). The rotation is
// RopeCuda's (the same device code, so q, and k before rounding, match RopeCuda bit for bit) and
// the stores round to nearest even as ConvertCuda does.
//   q [n, num_q_heads, head_dim] F32 (rotated in place), k, v [n, num_kv_heads, head_dim] F32,
//   positions [n] I64, inv_freq [head_dim / 2] F32,
//   k_cache, v_cache [n, num_kv_heads, head_dim] F32, BF16 or F16; or per-row destinations
//   (k_rows / v_rows, a decode step's tokens of several sequences): one launch per 128 rows,
//   their addresses in the launch's parameters.
Status RopeKvCuda(const RopeKvArgs& args, cudaStream_t stream);

}  // namespace millipede
