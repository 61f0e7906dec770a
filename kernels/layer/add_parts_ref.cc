#include "kernels/layer/add_parts.h"

namespace millipede {

Status AddPartsCheckArgs(const AddPartsArgs& args) {
  MP_REQUIRE(args.parts.rank() == 3, "add_parts parts: rank ", args.parts.rank(), ", expected 3");
  const int64_t m = args.parts.dim(1), n = args.parts.dim(2);
  MP_REQUIRE(args.parts.dtype == DType::kF32, "add_parts parts: dtype ",
             DTypeName(args.parts.dtype), ", expected F32");
  MP_REQUIRE(args.part_stride == 0 || args.part_stride >= m * n, "add_parts: part stride ",
             args.part_stride, " is shorter than a part (", m * n, " elements)");
  return CheckTensor(args.out, "add_parts out", DType::kF32, Shape{m, n});
}

Status AddPartsRef(const AddPartsArgs& args) {
  MP_RETURN_IF_ERROR(AddPartsCheckArgs(args));
  const int64_t parts = args.parts.dim(0);
  const int64_t count = args.parts.dim(1) * args.parts.dim(2);
  const int64_t stride = args.part_stride > 0 ? args.part_stride : count;
  if (parts == 0) return OkStatus();
  const float* in = args.parts.as<const float>();
  float* out = args.out.as<float>();
  for (int64_t e = 0; e < count; ++e) {
    float sum = in[e];
    for (int64_t r = 1; r < parts; ++r) sum += in[r * stride + e];
    out[e] += sum;
  }
  return OkStatus();
}

}  // namespace millipede
