// MInference's vertical-slash index (Algorithm 4 of the paper): from the key columns and the
// diagonals a KV head selected (by the last queries' attention, see key_scores.h), the key
// ranges and single columns each query tile attends to.
//
// For tile t whose last position is e, in the query block [a, b] (the kSparseTileRows positions
// holding it: a = pos_begin rounded down to a multiple of kSparseTileRows, b = a +
// kSparseTileRows - 1), and KV head g:
//  - every selected diagonal d (an offset q - k >= 0) covers the band of keys
//    [max(0, a - d), min(b - d, e)] (skipped when b - d < 0): the block's band, whatever part of
//    the block the tile holds, so that a block split between ranks sees the keys it sees whole
//    (keys after e are masked for every query of the tile); the bands are merged into disjoint
//    ranges (overlapping or touching bands become one), as the block kernels of MInference run
//    whole bands rather than single diagonals (the caller selects diagonal 0, as MInference forces
//    the nearest diagonals, so that every query sees itself);
//  - every selected column c <= e that no range covers is a single column.
// Ranges and columns are then placed in the key buffer by the key layout (sparse_index.h): a
// range spanning several runs becomes one range per run. A head that selects nothing (no column,
// no diagonal) has empty items: the heads of a layer that are not vertical-slash.
#pragma once

#include "kernels/sparse_index/sparse_index.h"

namespace millipede {

struct VerticalSlashIndexArgs {
  ConstTensorView tiles;  // [n_tiles, 3] I64 query tiles (sparse_index.h)
  ConstTensorView runs;   // [n_runs, 3] I64 key layout (sparse_index.h)
  // [num_kv_heads, n_vertical] I64: each KV head's selected column positions, ascending, then
  // -1 for unused slots (a head may select fewer).
  ConstTensorView columns;
  // [num_kv_heads, n_slash] I64: each KV head's selected diagonals (offsets >= 0), ascending,
  // then -1 for unused slots.
  ConstTensorView diagonals;
  // False: a needed position that no run covers is an error. True: it is left out (the caller
  // spreads the keys over several buffers, one index per buffer, and merges the partials).
  bool skip_absent = false;
  SparseIndexOut out;  // items = num_kv_heads * n_tiles
  // Set on the fill pass that directly follows its count pass, when the data of every input
  // tensor and of the offsets the count pass wrote has not changed since. The CUDA form then
  // reuses that pass's per-head selection counts and offsets instead of recomputing them,
  // provided nothing else used its workspace in between and every other argument (pointers,
  // shapes, skip_absent, the offsets' tensors) is the same; otherwise it recomputes. The CPU
  // reference ignores it.
  bool inputs_unchanged_since_count = false;
};

// Checks shapes and dtypes (not the data, which may live on a device).
Status VerticalSlashIndexCheckArgs(const VerticalSlashIndexArgs& args);

// Builds the index (or, in the count pass, its offsets). Selections out of order, a -1 followed by
// a selection, or (without skip_absent) a needed position missing from the key layout are
// InvalidArgument errors naming the head, tile and position.
Status VerticalSlashIndexRef(const VerticalSlashIndexArgs& args);

}  // namespace millipede
