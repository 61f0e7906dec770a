// CUDA form of SparseIndexPairsRef. Include only from CUDA-enabled translation units
// (MILLIPEDE_HAVE_CUDA builds); kernels/sparse_index/sparse_index_pairs.h stays CUDA-free.
#pragma once

#include <cuda_runtime.h>

#include "common/status.h"
#include "kernels/sparse_index/sparse_index_pairs.h"

namespace millipede {

// SparseIndexPairsRef with every tensor in device memory; enqueued on `stream` without waiting.
// Shapes are checked on the host; the offsets are not (the index builders write valid ones). One
// warp per item: its lanes take the item's ranges and columns in turn, and lane 0 adds the
// warp's sum to pairs[0] atomically.
Status SparseIndexPairsCuda(const SparseIndexPairsArgs& args, cudaStream_t stream);

}  // namespace millipede
