#include <cmath>

#include "kernels/silu_mul.h"

namespace millipede {

Status SiluMulCheckArgs(const SiluMulArgs& args) {
  MP_REQUIRE(args.gate.rank() == 2, "silu_mul gate: rank ", args.gate.rank(), ", expected 2");
  const Shape shape{args.gate.dim(0), args.gate.dim(1)};
  MP_RETURN_IF_ERROR(CheckTensor(args.gate, "silu_mul gate", DType::kF32, shape));
  MP_RETURN_IF_ERROR(CheckTensor(args.up, "silu_mul up", DType::kF32, shape));
  return CheckTensor(args.out, "silu_mul out", DType::kF32, shape);
}

Status SiluMulRef(const SiluMulArgs& args) {
  MP_RETURN_IF_ERROR(SiluMulCheckArgs(args));
  const Shape shape{args.gate.dim(0), args.gate.dim(1)};

  const float* gate = args.gate.as<const float>();
  const float* up = args.up.as<const float>();
  float* out = args.out.as<float>();
  const int64_t count = shape.NumElements();
  for (int64_t i = 0; i < count; ++i) {
    // Double keeps silu correctly rounded; for gate << 0, exp(-gate) = inf gives silu = -0.
    const double g = gate[i];
    out[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
  return OkStatus();
}

}  // namespace millipede
