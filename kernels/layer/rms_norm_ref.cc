#include <cmath>
#include <vector>

#include "kernels/layer/rms_norm.h"
#include "kernels/memory/float_rows.h"

namespace millipede {

Status RmsNormCheckArgs(const RmsNormArgs& args) {
  MP_REQUIRE(args.x.rank() == 2, "rms_norm x: rank ", args.x.rank(), ", expected 2");
  const int64_t n = args.x.dim(0);
  const int64_t hidden = args.x.dim(1);
  MP_REQUIRE(hidden > 0, "rms_norm: hidden size must be positive");
  MP_REQUIRE(args.eps >= 0.0f, "rms_norm: eps ", args.eps, " must be >= 0");
  MP_RETURN_IF_ERROR(CheckTensor(args.x, "rms_norm x", DType::kF32, Shape{n, hidden}));
  MP_RETURN_IF_ERROR(CheckFloatTensor(args.weight, "rms_norm weight", 1));
  MP_REQUIRE(args.weight.dim(0) == hidden, "rms_norm weight: shape ", args.weight.shape.ToString(),
             ", expected [", hidden, "]");
  if (args.residual.data != nullptr)
    MP_RETURN_IF_ERROR(
        CheckTensor(args.residual, "rms_norm residual", DType::kF32, Shape{n, hidden}));
  MP_REQUIRE(args.out.dtype == DType::kF32 || args.out.dtype == DType::kBF16 ||
                 args.out.dtype == DType::kF16,
             "rms_norm out: dtype ", DTypeName(args.out.dtype), ", expected F32, BF16 or F16");
  return CheckTensor(args.out, "rms_norm out", args.out.dtype, Shape{n, hidden});
}

Status RmsNormRef(const RmsNormArgs& args) {
  MP_RETURN_IF_ERROR(RmsNormCheckArgs(args));
  const int64_t n = args.x.dim(0);
  const int64_t hidden = args.x.dim(1);
  const bool has_residual = args.residual.data != nullptr;

  std::vector<float> weight(hidden);
  LoadFloatRow(args.weight.data, args.weight.dtype, 0, hidden, weight.data());
  for (int64_t r = 0; r < n; ++r) {
    const float* x = args.x.as<const float>() + r * hidden;
    const float* src = x;
    if (has_residual) {
      float* residual = args.residual.as<float>() + r * hidden;
      for (int64_t j = 0; j < hidden; ++j) residual[j] += x[j];
      src = residual;
    }
    // The mean of squares is summed in double so the reference's only fp32 roundings are the
    // ones HF makes (the mean itself, the rsqrt, and the two products).
    double sum_sq = 0.0;
    for (int64_t j = 0; j < hidden; ++j) sum_sq += static_cast<double>(src[j]) * src[j];
    const float variance = static_cast<float>(sum_sq / static_cast<double>(hidden));
    const float inv_rms = 1.0f / std::sqrt(variance + args.eps);
    for (int64_t j = 0; j < hidden; ++j)
      StoreFromFloat(args.out.data, args.out.dtype, static_cast<size_t>(r * hidden + j),
                     weight[j] * (src[j] * inv_rms));
  }
  return OkStatus();
}

}  // namespace millipede
