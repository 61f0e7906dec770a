// The sum of a few partial results into a residual stream: what ranks that each computed part of
// a product (decode's MLP split over context-parallel ranks) add once they have gathered them.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

struct AddPartsArgs {
  // [parts, m, n] F32: part r starts `part_stride` elements after part r - 1 (0: m * n); each
  // part's [m, n] is contiguous.
  ConstTensorView parts;
  int64_t part_stride = 0;
  // [m, n] F32, added into. Must not overlap `parts`.
  TensorView out;
};

// Checks AddPartsArgs' shapes and dtypes (not the data, which may live on a device).
Status AddPartsCheckArgs(const AddPartsArgs& args);

// out[i, j] += ((parts[0, i, j] + parts[1, i, j]) + ...) + parts[P-1, i, j]: the parts summed in
// fp32 in their order, then added to out, so that every implementation (and every rank) gives
// the same bits.
Status AddPartsRef(const AddPartsArgs& args);

}  // namespace millipede
