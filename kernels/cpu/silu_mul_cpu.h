// The CPU backend's SiLU-mul (kernels/layer/silu_mul.h), vectorised and threaded.
#pragma once

#include "common/status.h"
#include "kernels/layer/silu_mul.h"

namespace millipede {

// out = silu(gate) * up in fp32 (silu(x) = x / (1 + e^-x) with the vectorised exp: within a few
// fp32 ulps of SiluMulRef's double-precision result), rounded to out's dtype. Same checks,
// errors and in-place rules as SiluMulRef.
Status SiluMulCpu(const SiluMulArgs& args);

}  // namespace millipede
