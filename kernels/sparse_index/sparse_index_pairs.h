// The query-key pairs a sparse index makes its attention call compute: for every item (KV head,
// query tile) of the index, the keys of its ranges and columns that each query of the tile sees
// under the causal mask (positions <= its own), summed. The engine divides the total by the
// causal pairs of the same queries to report the prefill's achieved density per job.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "common/tensor.h"
#include "kernels/host_device.h"
#include "kernels/sparse_index/sparse_index.h"

namespace millipede {

struct SparseIndexPairsArgs {
  ConstTensorView tiles;  // [n_tiles, 3] I64 query tiles (sparse_index.h)
  SparseIndexView index;  // over num_kv_heads * n_tiles items (sparse_index.h)
  int64_t num_kv_heads = 0;
  // [1] I64: the pairs are added to it (a running count over many calls), not written over.
  TensorView pairs;
};

// Shapes and dtypes (not the data, which may live on a device).
Status SparseIndexPairsCheckArgs(const SparseIndexPairsArgs& args);

// The pairs of one key range at positions [pos_begin, pos_end) (or one column: pos_end =
// pos_begin + 1) for queries at positions [q_first, q_first + q_count): sum over the queries of
// the range's positions at or before the query.
MP_HOST_DEVICE inline int64_t SparseRangePairs(int64_t pos_begin, int64_t pos_end, int64_t q_first,
                                int64_t q_count) {
  const int64_t q_end = q_first + q_count, length = pos_end - pos_begin;
  if (length <= 0 || q_count <= 0) return 0;
  // Queries q in [u, v) see q + 1 - pos_begin keys of the range; those from pos_end on see all.
  const int64_t u = q_first > pos_begin ? q_first : pos_begin;
  const int64_t v = q_end < pos_end ? q_end : pos_end;
  int64_t pairs = 0;
  if (u < v)
    pairs += ((v - pos_begin) * (v - pos_begin + 1) - (u - pos_begin) * (u - pos_begin + 1)) / 2;
  const int64_t full_from = q_first > pos_end ? q_first : pos_end;
  if (q_end > full_from) pairs += length * (q_end - full_from);
  return pairs;
}

// Adds the pairs of the index to pairs[0], with the index read from host memory. The offsets
// must be non-decreasing and within the ranges and columns (OutOfRange otherwise, before anything
// is added).
Status SparseIndexPairsRef(const SparseIndexPairsArgs& args);

}  // namespace millipede
