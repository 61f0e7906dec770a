// CUDA form of TokenScoresRef. Include only from CUDA-enabled translation units
// (MILLIPEDE_HAVE_CUDA builds); kernels/selection/token_scores.h stays CUDA-free.
#pragma once

#include <cuda_runtime.h>

#include "common/status.h"
#include "kernels/selection/token_scores.h"

namespace millipede {

// TokenScoresRef with every tensor in device memory, accumulating in fp32; enqueued on `stream`.
// head_dim <= 256 and the query heads of one KV head within 48 KiB of shared memory. Shapes,
// dtypes and the scale are checked on the host; the lse values are not (a head with a NaN lse
// is left out, like one with -inf). Each key row is read once, coalesced, and dotted with every
// query head of its group (n_k * num_heads * head_dim multiply-adds, n_k rows of K read). BF16/F16
// keys with head_dim 64, 128 or 256, 16-byte aligned, and at most 8 query heads per KV head take
// the fast path: a row per 8-32 lanes in 16-byte loads, the group's queries in registers, four
// passes of rows loaded before any is used; otherwise a warp walks its rows one at a time.
Status TokenScoresCuda(const TokenScoresArgs& args, cudaStream_t stream);

}  // namespace millipede
