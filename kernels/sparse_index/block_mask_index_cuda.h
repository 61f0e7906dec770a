// CUDA form of BlockMaskIndexRef. Include only from CUDA-enabled translation units
// (MILLIPEDE_HAVE_CUDA builds); kernels/sparse_index/block_mask_index.h stays CUDA-free.
#pragma once

#include <cuda_runtime.h>

#include "common/status.h"
#include "kernels/sparse_index/block_mask_index.h"
#include "kernels/sparse_index/sparse_index_cuda.h"

namespace millipede {

// BlockMaskIndexRef with the tensors in device memory (heads stays a host array): the same index,
// entry for entry. One warp per item turns its bitmap's runs into ranges (block-sparse's warp,
// block_ranges.cuh), counting or writing after a device scan of the counts; a fill pass that
// may reuse its count pass (inputs_unchanged_since_count) only writes. Both passes wait for
// `stream` before returning.
Status BlockMaskIndexCuda(const BlockMaskIndexArgs& args, SparseIndexCudaWorkspace& workspace,
                          cudaStream_t stream);

}  // namespace millipede
