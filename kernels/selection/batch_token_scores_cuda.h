// CUDA form of BatchTokenScoresRef. Include only from CUDA-enabled translation units
// (MILLIPEDE_HAVE_CUDA builds); kernels/selection/batch_token_scores.h stays CUDA-free.
#pragma once

#include <cuda_runtime.h>

#include "common/status.h"
#include "kernels/selection/batch_token_scores.h"

namespace millipede {

// BatchTokenScoresRef with q, lse, keys and score in device memory, accumulating in fp32 as
// TokenScoresCuda does (each entry's scores equal TokenScoresCuda's, bit for bit); enqueued on
// `stream`. Shapes, dtypes, rows and the scale are checked on the host, the lse values are not.
// One launch per 64 entries on TokenScoresCuda's fast path (else one per entry), plus one that
// writes the NaN tails.
Status BatchTokenScoresCuda(const BatchTokenScoresArgs& args, cudaStream_t stream);

}  // namespace millipede
