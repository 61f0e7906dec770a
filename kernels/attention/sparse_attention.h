// Sparse grouped-query attention: each query tile attends, per KV head, to the key ranges and
// single key columns of its index (sparse_index.h), with one online softmax over both, and
// returns (o, lse) like every attention op, so that its partial merges with others by
// log-sum-exp (merge_state.h). Serves MInference's vertical-slash and block-sparse heads and
// A-shape heads (sinks + a local window as static ranges). No dense mask is ever built.
#pragma once

#include <cstdint>

#include "kernels/sparse_index/sparse_index.h"

namespace millipede {

struct SparseAttentionArgs {
  // [n_q, num_q_heads, head_dim] F32 (after RoPE).
  ConstTensorView q;
  // [n_kv, num_kv_heads, head_dim] F32, BF16 or F16: the key buffer the index points into
  // (num_q_heads % num_kv_heads == 0; query head h reads KV head h / (num_q_heads / num_kv_heads)).
  ConstTensorView k;
  // [n_kv, num_kv_heads, head_dim], k's dtype.
  ConstTensorView v;
  ConstTensorView tiles;  // [n_tiles, 3] I64 query tiles
  SparseIndexView index;  // items = num_kv_heads * n_tiles
  // 0 means 1 / sqrt(head_dim); otherwise finite and > 0.
  float scale = 0.0f;
  // [n_q, num_q_heads, head_dim] F32 and [n_q, num_q_heads] F32 natural-log LSE, for the rows of
  // every tile (rows in no tile are left untouched): softmax over the visible keys of the item
  // (positions <= the query's), o = 0 and lse = -inf where none is visible.
  TensorView o;
  TensorView lse;
};

// Shapes, dtypes and the scale, for any backend (the data may live on a device and is not read).
Status SparseAttentionCheckArgs(const SparseAttentionArgs& args);
// The contents of tiles and index, which must be in host memory: tiles inside q, at most
// kSparseTileRows rows, not crossing a multiple of kSparseTileRows, not overlapping; offsets
// from 0, non-decreasing, ending at the row counts; each item's ranges and columns inside k
// (OutOfRange otherwise), sorted and disjoint by position, no column inside a range.
Status SparseAttentionCheckData(const SparseAttentionArgs& args);
// Double accumulation; a row or position outside the buffers is an OutOfRange error.
Status SparseAttentionRef(const SparseAttentionArgs& args);

}  // namespace millipede
