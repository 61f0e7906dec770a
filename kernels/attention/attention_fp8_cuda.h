// CUDA form of AttentionFp8Ref (kernels/attention/attention_fp8.h). Include only from
// CUDA-enabled translation units (MILLIPEDE_HAVE_CUDA builds).
//
// One call: Fp8AttentionOperandsCuda rounds K and V into the workspace, then the Hopper FP8
// kernel (attention_fp8_wgmma.cu) runs, split over keys (whole 128-key tiles) when its row
// blocks cannot fill the GPU, the partials merged with MergeStateCuda. Needs head_dim 64 or 128
// and a compute capability 9.0 device (else Unimplemented); q, k and v 16-byte aligned.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "common/status.h"
#include "kernels/attention/attention_cuda.h"
#include "kernels/attention/attention_fp8.h"

namespace millipede {

// Whether AttentionFp8Cuda runs for this head_dim on the current device (64 or 128, compute
// capability 9.0).
bool AttentionFp8CudaRuns(int64_t head_dim);

// Bytes of device scratch AttentionFp8Cuda(args, options, ...) needs: the FP8 operands
// (n_kv x num_kv_heads x head_dim bytes for K, as much again for V padded to 128 keys, and their
// scales) and any split partials. Checks the arguments; asks the current device for its SMs.
StatusOr<size_t> AttentionFp8CudaWorkspaceBytes(const AttentionArgs& args,
                                                const AttentionCudaOptions& options = {});

// AttentionFp8Ref's result (within its rounding: fp32 summation order, exp2, split-KV), every
// tensor in device memory, enqueued on `stream`. options.num_splits and the workspace as for
// AttentionCuda (a null workspace is taken from the stream's pool and given back);
// options.allow_wgmma is ignored (there is no other FP8 kernel).
Status AttentionFp8Cuda(const AttentionArgs& args, const AttentionCudaOptions& options,
                        cudaStream_t stream);

}  // namespace millipede
