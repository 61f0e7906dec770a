// CUDA form of SparseAttentionRef (kernels/attention/sparse_attention.h). Include only from
// CUDA-enabled translation units (MILLIPEDE_HAVE_CUDA builds); sparse_attention.h stays CUDA-free.
//
// Paths (chosen per call, invisible to the caller except for precision and speed):
//  - Hopper tensor cores (sparse_attention_wgmma.cu): head_dim 64 or 128, BF16 or F16 K/V,
//    16-byte aligned q/k/v, a compute capability 9.0 device. One thread block per (item,
//    128 packed query rows): the query heads of the KV head packed as rows of one tile, as the
//    dense kernel does (GQA 4: a 64-position tile is 256 rows, two blocks). A producer
//    warpgroup fills a ring of 128-key K/V stages, each two 64-key chunks: a chunk of 64 rows
//    of one range by TMA, the last (partial) chunk of a range and chunks of single columns
//    gathered row by row with cp.async (the rows after a chunk's valid ones zero-filled); two
//    consumer warpgroups run the wgmma online softmax of attention_wgmma.cuh over the ranges'
//    chunks then the columns', masking only chunks that hold keys after the tile's first
//    position or fewer than 64 keys.
//  - CUDA cores (sparse_attention.cu): everything else up to head_dim 256 (F32 K/V, other head
//    dims, other devices), fp32 throughout, one warp per query row and head; slow, correct.
//
// Precision of the tensor-core path: as AttentionCuda's (attention_cuda.h): q rounded to K's
// type, probabilities to V's, fp32 sums and softmax statistics.
//
// The tiles and the index are read on the device and trusted (the index ops build valid ones):
// a key row outside k is never read (it counts as a zero key and value on the tensor-core path,
// and is skipped on the CUDA-core path), but no error is reported for it.
#pragma once

#include <cuda_runtime.h>

#include "common/status.h"
#include "kernels/attention/sparse_attention.h"

namespace millipede {

struct SparseAttentionCudaOptions {
  // false keeps every call on the CUDA-core path (tests compare the two).
  bool allow_wgmma = true;
};

// SparseAttentionRef's contract with every tensor in device memory; enqueued on `stream`.
// Shapes, dtypes and the scale are checked on the host (SparseAttentionCheckArgs); head_dim above
// 256 is Unimplemented.
Status SparseAttentionCuda(const SparseAttentionArgs& args, cudaStream_t stream);
Status SparseAttentionCuda(const SparseAttentionArgs& args,
                           const SparseAttentionCudaOptions& options, cudaStream_t stream);

}  // namespace millipede
