#include <cmath>

#include "kernels/layer/silu_mul.h"

namespace millipede {

Status SiluMulCheckArgs(const SiluMulArgs& args) {
  MP_REQUIRE(args.gate.rank() == 2, "silu_mul gate: rank ", args.gate.rank(), ", expected 2");
  const Shape shape{args.gate.dim(0), args.gate.dim(1)};
  MP_RETURN_IF_ERROR(CheckTensor(args.gate, "silu_mul gate", DType::kF32, shape));
  MP_RETURN_IF_ERROR(CheckTensor(args.up, "silu_mul up", DType::kF32, shape));
  MP_REQUIRE(args.out.dtype == DType::kF32 || args.out.dtype == DType::kBF16 ||
                 args.out.dtype == DType::kF16,
             "silu_mul out: dtype ", DTypeName(args.out.dtype), ", expected F32, BF16 or F16");
  return CheckTensor(args.out, "silu_mul out", args.out.dtype, shape);
}

Status SiluMulRef(const SiluMulArgs& args) {
  MP_RETURN_IF_ERROR(SiluMulCheckArgs(args));
  const Shape shape{args.gate.dim(0), args.gate.dim(1)};

  const float* gate = args.gate.as<const float>();
  const float* up = args.up.as<const float>();
  const int64_t count = shape.NumElements();
  for (int64_t i = 0; i < count; ++i) {
    // Double keeps silu correctly rounded; for gate << 0, exp(-gate) = inf gives silu = -0.
    const double g = gate[i];
    StoreFromFloat(args.out.data, args.out.dtype, static_cast<size_t>(i),
                   static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]));
  }
  return OkStatus();
}

}  // namespace millipede
