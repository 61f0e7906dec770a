// CUDA form of MergeStateRef. Include only from CUDA-enabled translation units
// (MILLIPEDE_HAVE_CUDA builds); kernels/merge_state.h stays CUDA-free.
#pragma once

#include <cuda_runtime.h>

#include "common/status.h"
#include "kernels/attention/merge_state.h"

namespace millipede {

// Same contract as MergeStateRef, with every tensor in device memory; enqueued on `stream`
// (asynchronous: errors in the kernel itself surface at the next synchronisation). Shapes and
// dtypes are checked on the host; lse values are not (NaN or +inf parts give NaN rows).
Status MergeStateCuda(const MergeStateArgs& args, cudaStream_t stream);

// MergeStateInPlaceRef on the device: (o, lse) becomes the merge of itself with
// (o_other, lse_other). o, o_other [n, num_heads, head_dim] F32; lse, lse_other [n, num_heads].
Status MergeStateInPlaceCuda(TensorView o, TensorView lse, ConstTensorView o_other,
                             ConstTensorView lse_other, cudaStream_t stream);

// The empty state: o = 0, lse = -inf (F32, any shapes).
Status ClearStateCuda(TensorView o, TensorView lse, cudaStream_t stream);

}  // namespace millipede
