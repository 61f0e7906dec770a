// The index of a sparse attention call (kernels/attention/sparse_attention.h) and the layouts its
// builders (vertical_slash_index.h, block_sparse_index.h) share. Everything is in global token
// positions until the last step, where positions become rows of a key buffer; so a builder gives
// the same index whether the keys sit in one buffer (one process) or are this rank's rows plus
// rows fetched from other ranks (context parallelism).
//
// Query tiles, [n_tiles, 3] I64, one row (q_row_begin, q_row_end, pos_begin) per tile: rows
// [q_row_begin, q_row_end) of q hold the consecutive positions pos_begin, pos_begin + 1, ...;
// at most kSparseTileRows rows; tiles do not overlap and never cross a multiple of
// kSparseTileRows in position (a tile is one 64-position query block, or the part of it this
// rank holds).
//
// Key layout, [n_runs, 3] I64, one row (pos_begin, pos_end, row_begin) per run: rows
// [row_begin, row_begin + pos_end - pos_begin) of the key buffer hold positions
// [pos_begin, pos_end). Runs are sorted by pos_begin and cover disjoint positions; a position
// no run covers is not in the buffer, and an index that needs it is an error.
//
// The index is CSR over items i = g * n_tiles + t (KV head g, tile t):
//   range_offsets  [num_kv_heads * n_tiles + 1] I64, starting at 0, non-decreasing;
//   ranges         [range_offsets.back(), 3] I64, rows (row_begin, row_end, pos_begin): the
//                  key buffer rows [row_begin, row_end) at positions pos_begin, pos_begin + 1, ...
//                  Item i's ranges are ranges[range_offsets[i], range_offsets[i + 1]), sorted by
//                  position and disjoint;
//   column_offsets [num_kv_heads * n_tiles + 1] I64;
//   columns        [column_offsets.back(), 2] I64, rows (row, pos): single keys, sorted by
//                  position, none inside the item's ranges.
// A query of tile t and a query head of KV head g attends to the keys of item i at positions
// <= its own (causal). Memory is O(what is selected), never O(positions) per head.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

inline constexpr int64_t kSparseTileRows = 64;

struct SparseIndexView {
  ConstTensorView range_offsets;   // [items + 1] I64
  ConstTensorView ranges;          // [n_ranges, 3] I64
  ConstTensorView column_offsets;  // [items + 1] I64
  ConstTensorView columns;         // [n_columns, 2] I64
};

// A builder's output. A builder called with ranges.data == nullptr and columns.data == nullptr
// writes only the two offset arrays (the count pass); the caller then sizes ranges and columns
// by their last entries and calls it again with the same inputs to fill everything.
struct SparseIndexOut {
  TensorView range_offsets;   // [items + 1] I64
  TensorView ranges;          // [n_ranges, 3] I64, or null in the count pass
  TensorView column_offsets;  // [items + 1] I64
  TensorView columns;         // [n_columns, 2] I64, or null in the count pass
  bool CountPass() const { return ranges.data == nullptr && columns.data == nullptr; }
};

// Shape and dtype checks shared by the builders and the attention op (not the data, which may
// live on a device). `what` names the caller.
Status SparseTilesCheck(ConstTensorView tiles, const char* what);
Status SparseRunsCheck(ConstTensorView runs, const char* what);
Status SparseIndexCheck(const SparseIndexView& index, int64_t items, const char* what);
Status SparseIndexOutCheck(const SparseIndexOut& out, int64_t items, const char* what);

}  // namespace millipede
