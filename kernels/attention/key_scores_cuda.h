// CUDA form of KeyScoresRef. Include only from CUDA-enabled translation units
// (MILLIPEDE_HAVE_CUDA builds); kernels/attention/key_scores.h stays CUDA-free.
#pragma once

#include <cuda_runtime.h>

#include "common/status.h"
#include "kernels/attention/key_scores.h"

namespace millipede {

// KeyScoresRef with every tensor in device memory, accumulating in fp32; enqueued on `stream`.
// head_dim <= 256. Shapes, dtypes and the scale are checked on the host; the lse values are not
// (a NaN or +inf lse gives NaN scores). Cost: n_q * num_heads * n_k * head_dim multiply-adds on
// CUDA cores, with every block of 32 keys reading all the queries of its KV head (from L2).
// diag_score (zeroed first) gathers each block's terms by diagonal in shared memory when the
// block's diagonals span at most 1024 (queries and keys at consecutive positions), otherwise with
// one global atomic per term; the order of the atomic adds makes it vary in the last bits.
Status KeyScoresCuda(const KeyScoresArgs& args, cudaStream_t stream);

}  // namespace millipede
