// CUDA form of VerticalSlashIndexRef. Include only from CUDA-enabled translation units
// (MILLIPEDE_HAVE_CUDA builds); kernels/sparse_index/vertical_slash_index.h stays CUDA-free.
#pragma once

#include <cuda_runtime.h>

#include "common/status.h"
#include "kernels/sparse_index/sparse_index_cuda.h"
#include "kernels/sparse_index/vertical_slash_index.h"

namespace millipede {

// VerticalSlashIndexRef with every tensor in device memory: the same index, entry for entry.
// Both passes wait for `stream` before returning (the count pass's offsets are then ready to
// read, and a broken input is an InvalidArgument naming the head, tile and position, as on the
// CPU).
//
// How: a check kernel validates tiles, runs and selections and counts each head's selections;
// then one warp per item (KV head, tile) walks the head's diagonals from the largest that reaches
// the tile's query block down to 0, 32 at a time: a band starts a new range where the gap to the
// next larger diagonal exceeds the block's length and ends one where the gap to the next smaller
// does, so the merged ranges come out in position order from ballots, and each is cut at run
// boundaries. Columns are tested 32 at a time against the diagonals by binary search (column c
// is inside a band of block [a, b] iff some diagonal lies in [a - c, b - c]). Offsets come from a
// device scan; the fill pass checks and counts again, scans and writes, unless
// inputs_unchanged_since_count lets it take the counts and offsets from the count pass just
// before (then it only writes). Cost per item: (reaching diagonals + columns up to the tile) / 32
// warp steps.
Status VerticalSlashIndexCuda(const VerticalSlashIndexArgs& args,
                              SparseIndexCudaWorkspace& workspace, cudaStream_t stream);

}  // namespace millipede
