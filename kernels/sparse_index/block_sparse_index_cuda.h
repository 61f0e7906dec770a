// CUDA form of BlockSparseIndexRef. Include only from CUDA-enabled translation units
// (MILLIPEDE_HAVE_CUDA builds); kernels/sparse_index/block_sparse_index.h stays CUDA-free.
#pragma once

#include <cuda_runtime.h>

#include "common/status.h"
#include "kernels/sparse_index/block_sparse_index.h"
#include "kernels/sparse_index/sparse_index_cuda.h"

namespace millipede {

// BlockSparseIndexRef with the tensors in device memory (top_blocks stays a host array). Scores
// are fp32 dot products on CUDA cores rather than double, so key blocks whose scores tie within
// fp32 rounding may be chosen differently from the reference; exact ties still go to the lower
// block. Both passes wait for `stream` before returning (broken inputs are InvalidArgument
// errors, as on the CPU).
//
// How: tiles are taken in slabs whose scores fit a fixed scratch (128 MiB). Per slab a tiled
// GEMM writes score(tile, kb) for every KV head and the key blocks before the tile's query
// block; then one thread block per item radix-selects the top_blocks[g] - 1 best candidates
// (8-bit digits over order-preserving keys, ties to the lower block by a block scan) into a
// kept-block bitmap (scratch: items * num_blocks bits). One warp per item then turns runs of
// kept blocks into ranges cut at run boundaries, counting (count pass) or writing (fill pass)
// after a device scan of the counts. The fill pass repeats the selection and the counts, unless
// inputs_unchanged_since_count lets it take them from the count pass just before (the bitmaps
// stay in the workspace; then only the writing warps run). Cost: num_kv_heads * n_tiles * query
// block * head_dim multiply-adds, a read of each score, and the bitmaps.
Status BlockSparseIndexCuda(const BlockSparseIndexArgs& args, SparseIndexCudaWorkspace& workspace,
                            cudaStream_t stream);

}  // namespace millipede
