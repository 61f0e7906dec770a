// OmniKV's gather index: from the context rows each KV head chose for a decode step (TopK in
// column order on one rank, the agreed cut of GlobalTopK over several), the index of one row
// gather that lays them out slot by slot, [slots, num_kv_heads, head_dim], so that one attention
// call covers every head (a head with fewer rows is padded; its count goes to
// AttentionArgs::kv_head_rows), and each head's count. The index is repeated over `blocks`
// blocks of the source: the K and V of several layers in one host arena, loaded by one gather.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

struct SelectionIndexArgs {
  // [num_kv_heads, slots] I32: head g's chosen rows, each in [0, rows), followed by -1 in the
  // slots it does not fill (no chosen row after a -1).
  ConstTensorView chosen;
  // Context rows per block: a block is [rows, num_kv_heads, head_dim] of the source, viewed as
  // rows * num_kv_heads rows of head_dim. At least 1 when slots > 0.
  int64_t rows = 0;
  // Source rows (of head_dim) from one block to the next (>= rows * num_kv_heads when blocks > 1).
  int64_t block_stride = 0;
  // [blocks, slots * num_kv_heads] I64: entry (b, i * num_kv_heads + g) is
  // b * block_stride + chosen[g, i] * num_kv_heads + g, the source row of slot i of head g in
  // block b; a padding slot (-1) gets row 0 of head g of the block (read, never attended to).
  TensorView index;
  // [num_kv_heads] I32: the chosen rows of each head (its entries before the first -1).
  TensorView counts;
};

// Shapes, dtypes, rows and block_stride (not the data, which may live on a device).
Status SelectionIndexCheckArgs(const SelectionIndexArgs& args);
// Writes index and counts. An entry outside [-1, rows), or a chosen row after a -1, is an
// OutOfRange error, returned before anything is written (the GPU trusts its inputs: TopK and the
// global cut produce valid ones). slots == 0 or blocks == 0: counts only.
Status SelectionIndexRef(const SelectionIndexArgs& args);

}  // namespace millipede
