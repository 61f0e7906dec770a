// CUDA form of BatchDecodeAttentionRef (kernels/attention/batch_decode_attention.h). Include only
// from CUDA-enabled translation units (MILLIPEDE_HAVE_CUDA builds).
//
// Tensor-core path (head_dim 64 or 128, K and V both BF16 or both F16, at most 16 query heads per
// KV head, 16-byte aligned q/k/v): the decode instance of the mma.sync kernel
// (attention_flash.cu) with one thread block per (sequence, KV head, key split): the sequences'
// K/V addresses and lengths travel in the launch's parameters (up to 128 sequences a launch),
// the key splits follow the longest sequence (one wave of resident blocks), and the partials of
// every sequence are merged by one MergeStateCuda. Precision as AttentionCuda's tensor-core path
// (attention_cuda.h). Anything else runs AttentionCuda per sequence, without args.lengths.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "common/status.h"
#include "kernels/attention/attention_cuda.h"
#include "kernels/attention/batch_decode_attention.h"

namespace millipede {

// Bytes of workspace BatchDecodeAttentionCuda needs (0 when it does not split). Checks the
// arguments; asks the current device for its SM count. Only options.num_splits is read.
StatusOr<size_t> BatchDecodeAttentionCudaWorkspaceBytes(const BatchDecodeAttentionArgs& args,
                                                        const AttentionCudaOptions& options = {});

// Whether the tensor-core path runs `args` (the one that takes args.lengths). Checks nothing.
bool BatchDecodeAttentionCudaTakesLengths(const BatchDecodeAttentionArgs& args);
// Whether it runs K/V of this head_dim, query heads per KV head and dtype (K and V alike) whose
// rows and q, o are 16-byte aligned.
bool BatchDecodeAttentionCudaTakesLengthsFor(int64_t head_dim, int64_t group, DType kv_dtype);

// Same contract as BatchDecodeAttentionRef with every tensor in device memory (the K/V entries'
// views themselves on the host); enqueued on `stream`. options.workspace as in AttentionCuda:
// null takes stream-ordered scratch for the call.
Status BatchDecodeAttentionCuda(const BatchDecodeAttentionArgs& args,
                                const AttentionCudaOptions& options, cudaStream_t stream);

}  // namespace millipede
