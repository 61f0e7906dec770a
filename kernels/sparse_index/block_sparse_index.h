// MInference's block-sparse index (Algorithm 3): each query block attends to the key blocks
// whose mean-pooled keys score highest against its mean-pooled queries.
//
// Per KV head g, query block qb = pos_begin / block of a tile, and key block kb <= qb with at
// least one key (k_counts[kb] > 0): score(qb, kb) = mean_q[qb, g] . mean_k[kb, g], where
// mean_q = q_sums / (q_counts * group) and mean_k = k_sums / k_counts (group: query heads per KV
// head; the query sums already add the group's heads, block_sums.h). The diagonal block kb = qb
// is always kept; the other top_blocks[g] - 1 places go to the best scores (ties: the lower kb).
// A head with top_blocks[g] == 0 is not block-sparse: its items are empty.
// The tile's ranges are its kept blocks' positions [kb * block, min((kb + 1) * block, b + 1)),
// merged when adjacent and placed in the key buffer by the key layout (sparse_index.h). There
// are no single columns (column_offsets all 0).
// Tiles must not cross a multiple of `block` in position (the caller cuts tiles at multiples of
// gcd(block, kSparseTileRows)).
#pragma once

#include "kernels/sparse_index/sparse_index.h"

namespace millipede {

struct BlockSparseIndexArgs {
  ConstTensorView tiles;     // [n_tiles, 3] I64 query tiles
  ConstTensorView runs;      // [n_runs, 3] I64 key layout
  ConstTensorView q_sums;    // [num_blocks, num_kv_heads, head_dim] F32 (every rank's rows added)
  ConstTensorView q_counts;  // [num_blocks] F32
  ConstTensorView k_sums;    // [num_blocks, num_kv_heads, head_dim] F32
  ConstTensorView k_counts;  // [num_blocks] F32
  int64_t block = 64;        // > 0
  int64_t group = 1;         // query heads per KV head (> 0)
  // [num_kv_heads] I64 host memory: key blocks kept per query block, counting the diagonal
  // block; 0 for a head that is not block-sparse.
  const int64_t* top_blocks = nullptr;
  bool skip_absent = false;  // as in vertical_slash_index.h
  SparseIndexOut out;        // items = num_kv_heads * n_tiles
  // Set on the fill pass that directly follows its count pass, when the data of every input
  // tensor and of the offsets the count pass wrote has not changed since. The CUDA form then
  // reuses that pass's selection and offsets instead of recomputing them, provided nothing else
  // used its workspace in between and every other argument (pointers, shapes, block, group,
  // top_blocks values, skip_absent, the offsets' tensors) is the same; otherwise it recomputes.
  // The CPU reference ignores it.
  bool inputs_unchanged_since_count = false;
};

Status BlockSparseIndexCheckArgs(const BlockSparseIndexArgs& args);
// Scores in double. A tile whose query block has q_counts == 0, a tile crossing a block
// boundary, or (without skip_absent) a needed position missing from the key layout is an
// InvalidArgument error.
Status BlockSparseIndexRef(const BlockSparseIndexArgs& args);

}  // namespace millipede
