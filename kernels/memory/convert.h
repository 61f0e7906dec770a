// Element type conversion between float tensors (the KV cache write: F32 -> BF16/F16).
#pragma once

#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

// dst = src converted to dst's dtype, rounding to nearest even (common/dtype.h). src and dst are
// F32, BF16, F16 or F64 with the same element count; they must not overlap unless identical.
// The CPU reference is ConvertFloats (common/dtype.h); this checks the arguments around it.
Status ConvertCheckArgs(ConstTensorView src, TensorView dst);
Status ConvertRef(ConstTensorView src, TensorView dst);

}  // namespace millipede
