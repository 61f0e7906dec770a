// CUDA form of Fp8AttentionOperandsRef. Include only from CUDA-enabled translation units
// (MILLIPEDE_HAVE_CUDA builds); kernels/attention/attention_fp8_operands.h stays CUDA-free.
#pragma once

#include <cuda_runtime.h>

#include "common/status.h"
#include "kernels/attention/attention_fp8_operands.h"

namespace millipede {

// Fp8AttentionOperandsRef with every tensor in device memory, enqueued on `stream`: the same
// bytes and scales (the quantisation is integer arithmetic after two fp32 operations rounded to
// nearest, as on the host). head_dim up to 256, a multiple of 16.
Status Fp8AttentionOperandsCuda(const Fp8AttentionOperandsArgs& args, cudaStream_t stream);

}  // namespace millipede
