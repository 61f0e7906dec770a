// CUDA form of SiluMulRef. Include only from CUDA-enabled translation units
// (MILLIPEDE_HAVE_CUDA builds); kernels/layer/silu_mul.h stays CUDA-free.
#pragma once

#include <cuda_runtime.h>

#include "common/status.h"
#include "kernels/layer/silu_mul.h"

namespace millipede {

// SiluMulRef on device memory, enqueued on `stream` (asynchronous), computed in fp32 (the
// reference uses double): out = gate / (1 + exp(-gate)) * up. An F32 `out` may be `gate` or `up`;
// a BF16/F16 `out` holds this kernel's F32 result rounded to nearest even (bit for bit what
// ConvertCuda of its F32 output gives).
//   gate, up: [n, inter] F32; out: [n, inter] F32, BF16 or F16.
Status SiluMulCuda(const SiluMulArgs& args, cudaStream_t stream);

}  // namespace millipede
