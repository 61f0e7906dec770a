// Internal helper of the CPU references: bulk float conversion with the dtype switch hoisted out
// of the element loop.
#pragma once

#include <cstdint>

#include "common/dtype.h"

namespace millipede {

// out[i] = float(data[offset + i]) for i < count, where data holds elements of `dtype`
// (F32, BF16, F16, F64 or F8E4M3; callers check IsLoadableDType first).
void LoadFloatRow(const void* data, DType dtype, int64_t offset, int64_t count, float* out);

}  // namespace millipede
