// CUDA form of BlockSumsRef. Include only from CUDA-enabled translation units
// (MILLIPEDE_HAVE_CUDA builds); kernels/sparse_index/block_sums.h stays CUDA-free.
#pragma once

#include <cuda_runtime.h>

#include "common/status.h"
#include "kernels/sparse_index/block_sums.h"
#include "kernels/sparse_index/sparse_index_cuda.h"

namespace millipede {

// BlockSumsRef with every tensor in device memory, accumulating in fp32 (so within rounding of
// the double reference). Waits for `stream` before returning: broken runs (rows not covered
// exactly once, positions beyond the blocks) are InvalidArgument errors, as on the CPU.
// How: one thread block per position block; its threads take (head group, dim) outputs, so that
// each row of x is read once, coalesced. A check kernel (one block, O(n_runs^2)) validates the
// runs first.
Status BlockSumsCuda(const BlockSumsArgs& args, SparseIndexCudaWorkspace& workspace,
                     cudaStream_t stream);

}  // namespace millipede
