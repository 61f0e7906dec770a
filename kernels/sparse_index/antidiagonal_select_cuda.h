// CUDA form of AntidiagonalSelectRef. Include only from CUDA-enabled translation units
// (MILLIPEDE_HAVE_CUDA builds); kernels/sparse_index/antidiagonal_select.h stays CUDA-free.
#pragma once

#include <cuda_runtime.h>

#include "common/status.h"
#include "kernels/sparse_index/antidiagonal_select.h"
#include "kernels/sparse_index/sparse_index_cuda.h"

namespace millipede {

// AntidiagonalSelectRef with the tensors in device memory (permille stays a host array). Needs
// head_dim % 8 == 0, stride * head_dim % 32 == 0 and block / stride <= 16.
//
// How: one thread block per KV head and scored query block holds the reshaped query rows of up
// to four of the head's query heads in shared memory (bf16) and streams the reshaped key rows
// through tensor-core MMAs (m16n8k16, bf16 in, fp32 out; keys of any KV dtype rounded to bf16),
// twice: the rows' softmax maxima and sums, then each key block's mass added into a row of
// scratch. A second kernel turns each row into its kept bitmap, the threshold found by bisection
// over the fixed-point masses (AntidiagonalKeep's rule, so equal masses give equal blocks).
// Masses therefore differ from the reference's by bf16 rounding of q and k (about 1e-3
// relative), and blocks at the threshold's edge may differ with them. Query blocks run in slabs
// whose masses fit 256 MiB of scratch. Cost: 2 * kv_heads * group * sum over scored blocks of
// R * (R * qb + R) / 2 * stride * head_dim multiply-adds, and as many reads of k from L2.
// Waits for `stream` before returning (broken inputs are InvalidArgument errors).
Status AntidiagonalSelectCuda(const AntidiagonalSelectArgs& args,
                              SparseIndexCudaWorkspace& workspace, cudaStream_t stream);

}  // namespace millipede
