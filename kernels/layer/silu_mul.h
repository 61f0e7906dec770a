// The middle of the SiLU-gated MLP: down(silu(gate(x)) * up(x)).
#pragma once

#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

struct SiluMulArgs {
  // [n, inter] F32: the gate projection's output.
  ConstTensorView gate;
  // [n, inter] F32: the up projection's output.
  ConstTensorView up;
  // [n, inter] F32, BF16 or F16 (rounded to nearest even: a GEMM input already in the weights'
  // dtype, see GemmArgs::a). An F32 `out` may be the same buffer as `gate` or `up`; a BF16/F16
  // one must not overlap them.
  TensorView out;
};

// Checks SiluMulArgs' shapes and dtypes (not the data, which may live on a device).
Status SiluMulCheckArgs(const SiluMulArgs& args);

// out = silu(gate) * up, elementwise, with silu(x) = x / (1 + exp(-x)); a BF16/F16 `out` holds
// the F32 result rounded to nearest even.
Status SiluMulRef(const SiluMulArgs& args);

}  // namespace millipede
