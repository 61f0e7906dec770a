// Internal interface between BlockSparseIndexCuda (block_sparse_index.cu) and its selection
// step (block_sparse_select.cu). Include only from .cu files.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/status.h"
#include "kernels/sparse_index/block_sparse_index.h"
#include "kernels/sparse_index/sparse_index.cuh"

namespace millipede::block_sparse_cuda {

// Writes each item's kept-block bitmap: kept[(g * n_tiles + t) * words + kb / 32] bit kb % 32
// for the kept key blocks kb (the tile's query block and the top[g] - 1 best earlier non-empty
// ones); all zero for an item with top[g] == 0 or a broken tile. `top` is in device memory,
// max_top its largest entry.
Status Select(const BlockSparseIndexArgs& args, const int64_t* top, int64_t max_top, uint32_t* kept,
              int64_t words, SparseIndexCudaWorkspace::Impl& ws, cudaStream_t stream);

}  // namespace millipede::block_sparse_cuda
