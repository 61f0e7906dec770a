// The cut of a top-k over several ranks, on each rank: from every rank's TopKKeys (all-gathered,
// [ranks, rows, k]), the k best keys of each row over all ranks, and this rank's share of them —
// the columns of its own entries that made the cut, in the order its TopK gave them (column
// order for OmniKV, so a gather index needs no sort). The same cut as GlobalTopK on the host:
// each rank offers its local best k, so the global best k are among the offers.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

struct TopKCutArgs {
  // [ranks, rows, k] I64, read as unsigned: every rank's TopKKeys in rank order (0: an empty
  // slot). Non-zero keys of a row are distinct (they encode distinct positions).
  ConstTensorView keys;
  // [rows, k] I32: this rank's TopK columns, entry (row, i) keyed by keys[rank, row, i].
  ConstTensorView index;
  // This rank, in [0, ranks).
  int64_t rank = 0;
  // [rows, slots] I32, slots <= k: each row's kept columns of this rank, in index's order,
  // followed by -1. A row's kept entries are those whose key is non-zero and not below the k-th
  // largest key of the row over all ranks (all non-zero keys when there are fewer than k).
  TensorView chosen;
  // Elements from one rank's keys to the next: 0 means rows * k (`keys` contiguous); at least
  // rows * k otherwise, so that `keys` may be some rows of a larger all-gathered block (the filter
  // layers of several sequences exchange their keys in one all-gather and cut sequence by
  // sequence).
  int64_t rank_stride = 0;
};

// Shapes, dtypes and rank (not the data, which may live on a device).
Status TopKCutCheckArgs(const TopKCutArgs& args);
// Writes chosen. More kept entries in a row than slots, or a kept entry whose column is
// negative, is an OutOfRange error, returned before anything is written.
Status TopKCutRef(const TopKCutArgs& args);

}  // namespace millipede
