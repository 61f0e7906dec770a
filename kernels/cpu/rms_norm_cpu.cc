#include "kernels/cpu/rms_norm_cpu.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vector_math.h"

namespace millipede {
namespace {

// Normalises rows [r0, r1). `row` is per-thread scratch for outputs narrower than F32.
MP_CPU_CLONES void NormRows(const RmsNormArgs& args, const float* weight, int64_t r0, int64_t r1) {
  const int64_t hidden = args.x.dim(1);
  thread_local std::vector<float> narrow;
  if (args.out.dtype != DType::kF32) narrow.resize(static_cast<size_t>(hidden));
  for (int64_t r = r0; r < r1; ++r) {
    const float* src = args.x.as<const float>() + r * hidden;
    if (args.residual.data != nullptr) {
      float* residual = args.residual.as<float>() + r * hidden;
#pragma omp simd
      for (int64_t j = 0; j < hidden; ++j) residual[j] += src[j];
      src = residual;
    }
    double sum_sq = 0.0;
#pragma omp simd reduction(+ : sum_sq)
    for (int64_t j = 0; j < hidden; ++j) sum_sq += static_cast<double>(src[j]) * src[j];
    const float variance = static_cast<float>(sum_sq / static_cast<double>(hidden));
    const float inv_rms = 1.0f / std::sqrt(variance + args.eps);
    float* out = args.out.dtype == DType::kF32 ? args.out.as<float>() + r * hidden : narrow.data();
#pragma omp simd
    for (int64_t j = 0; j < hidden; ++j) out[j] = weight[j] * (src[j] * inv_rms);
    if (args.out.dtype != DType::kF32)
      cpu::NarrowRow(out, hidden, args.out.data, args.out.dtype, r * hidden);
  }
}

}  // namespace

Status RmsNormCpu(const RmsNormArgs& args) {
  MP_RETURN_IF_ERROR(RmsNormCheckArgs(args));
  const int64_t n = args.x.dim(0), hidden = args.x.dim(1);
  std::vector<float> weight(static_cast<size_t>(hidden));
  cpu::WidenRow(args.weight.data, args.weight.dtype, 0, hidden, weight.data());
  constexpr int64_t kRowsPerItem = 16;
  cpu::ParallelFor(
      (n + kRowsPerItem - 1) / kRowsPerItem, 4.0 * static_cast<double>(n) * hidden, [&](int64_t i) {
        NormRows(args, weight.data(), i * kRowsPerItem, std::min(n, (i + 1) * kRowsPerItem));
      });
  return OkStatus();
}

}  // namespace millipede
