// dst[i] = src[index[i]]: rows picked by index (the selected keys of a KV head, rows of a host KV
// tier). A per-KV-head gather views K [n, num_kv_heads, head_dim] as [n * num_kv_heads, head_dim]
// and picks row j * num_kv_heads + g.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

struct GatherRowsArgs {
  // [n, ...] of any dtype: n rows of row_elems = NumElements() / n elements each (a row is
  // everything after dimension 0).
  ConstTensorView src;
  // [m] I32 or I64: the source row of each output row, in [0, n). Rows may repeat.
  ConstTensorView index;
  // [m, ...] src's dtype, m rows of row_elems elements (the trailing shape may differ from
  // src's; only the row size must match). Must not overlap src.
  TensorView dst;
};

// Checks GatherRowsArgs' shapes and dtypes (not the indices, which may live on a device).
Status GatherRowsCheckArgs(const GatherRowsArgs& args);

// Copies the rows. An index outside [0, n) is an OutOfRange error naming the entry, returned
// before anything is written. m == 0: nothing to do.
Status GatherRowsRef(const GatherRowsArgs& args);

}  // namespace millipede
