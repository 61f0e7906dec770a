// CUDA form of KeyScoresRef. Include only from CUDA-enabled translation units
// (MILLIPEDE_HAVE_CUDA builds); kernels/selection/key_scores.h stays CUDA-free.
#pragma once

#include <cuda_runtime.h>

#include "common/status.h"
#include "kernels/selection/key_scores.h"

namespace millipede {

// KeyScoresRef with every tensor in device memory, accumulating in fp32; enqueued on `stream`.
// head_dim <= 256. Shapes, dtypes and the scale are checked on the host; the lse values are not
// (a NaN or +inf lse gives unspecified scores). diag_score is zeroed first; the order of its
// atomic adds makes it vary in the last bits.
// BF16 and F16 keys with head_dim 64, 128 or 256 run on tensor cores (key_scores_mma.cuh):
// n_q * num_heads * n_k * head_dim multiply-adds twice over (q as two 16-bit parts, so scores
// stay within a few 1e-6 of the double reference), exp and both sums fused, K read once.
// Other keys (F32, other head dims) run on CUDA cores, every block of 32 keys reading all the
// queries of its KV head (from L2); their diagonals are gathered in shared memory when a block's
// diagonals span at most 1024 (queries and keys at consecutive positions), otherwise added with
// one global atomic per term.
Status KeyScoresCuda(const KeyScoresArgs& args, cudaStream_t stream);

}  // namespace millipede
