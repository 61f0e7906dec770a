// CUDA form of EmbeddingRef. Include only from CUDA-enabled translation units
// (MILLIPEDE_HAVE_CUDA builds); kernels/layer/embedding.h stays CUDA-free.
#pragma once

#include <cuda_runtime.h>

#include "common/status.h"
#include "kernels/layer/embedding.h"

namespace millipede {

// EmbeddingRef with every tensor in device memory, enqueued on `stream` (asynchronous). Shapes
// and dtypes are checked on the host; the ids are not, since they live on the device: a row whose
// id lies outside [0, vocab) is filled with NaN instead of being read out of bounds, so the bad
// input reaches the logits, where SampleCuda rejects it.
//   ids [n] I32, table [vocab, hidden] F32/BF16/F16/F64, out [n, hidden] F32.
Status EmbeddingCuda(const EmbeddingArgs& args, cudaStream_t stream);

}  // namespace millipede
