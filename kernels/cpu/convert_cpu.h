// The CPU backend's dtype conversion (kernels/memory/convert.h), vectorised and threaded.
#pragma once

#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

// ConvertRef's result (rounding to nearest even), checks and errors.
Status ConvertCpu(ConstTensorView src, TensorView dst);

}  // namespace millipede
