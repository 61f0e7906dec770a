// The k best entries of each row of a score matrix: the selection step of static eviction (per KV
// head, the keys to keep) and, later, of the vertical-slash, block-sparse and OmniKV index
// builders.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

// Order: a higher value ranks first; equal values (-0.0 equals +0.0) rank by the lower column.
// NaN entries are never selected (as if the column were absent); -inf and +inf are ordinary
// values. A row with fewer than k selectable entries (cols < k, or NaNs) fills its tail with
// index -1 and value -inf. Rows are independent.

// How each row's selected entries are laid out in the output (the set is the same).
enum class TopKOrder {
  kValue,   // best first, by the order above
  kColumn,  // by increasing column: a gather index in position order (OmniKV's chosen tokens),
            // and no sort on the GPU
};

struct TopKArgs {
  // [rows, cols] F32. cols must fit in an int32 (the indices' type).
  ConstTensorView scores;
  // How many entries per row; >= 0 (k > cols is allowed: see the tail rule above).
  int64_t k = 0;
  // [rows, k] I32: the selected columns of each row, in `order`.
  TensorView index;
  // [rows, k] F32: scores[row, index[row, i]] (the stored value, so -0.0 stays -0.0).
  TensorView value;
  TopKOrder order = TopKOrder::kValue;
};

// Checks TopKArgs' shapes and dtypes (not the data, which may live on a device).
Status TopKCheckArgs(const TopKArgs& args);

// Writes index and value for every row. rows == 0 or k == 0: nothing to write.
Status TopKRef(const TopKArgs& args);

}  // namespace millipede
