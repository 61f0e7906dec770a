#include "kernels/cpu/silu_mul_cpu.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vector_math.h"

namespace millipede {
namespace {

constexpr int64_t kElementsPerItem = 16384;

// out[i] = silu(gate[i]) * up[i] for i < n. For gate << 0, e^-gate = inf gives -0, as in the
// reference.
MP_CPU_CLONES void SiluMulRow(const float* gate, const float* up, float* out, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + cpu::ExpF(-gate[i])) * up[i];
}

}  // namespace

Status SiluMulCpu(const SiluMulArgs& args) {
  MP_RETURN_IF_ERROR(SiluMulCheckArgs(args));
  const int64_t count = args.gate.NumElements();
  const float* gate = args.gate.as<const float>();
  const float* up = args.up.as<const float>();
  const int64_t items = (count + kElementsPerItem - 1) / kElementsPerItem;
  cpu::ParallelFor(items, 20.0 * static_cast<double>(count), [&](int64_t i) {
    const int64_t begin = i * kElementsPerItem, n = std::min(kElementsPerItem, count - begin);
    if (args.out.dtype == DType::kF32) {
      SiluMulRow(gate + begin, up + begin, args.out.as<float>() + begin, n);
      return;
    }
    thread_local std::vector<float> row;
    row.resize(static_cast<size_t>(n));
    SiluMulRow(gate + begin, up + begin, row.data(), n);
    cpu::NarrowRow(row.data(), n, args.out.data, args.out.dtype, begin);
  });
  return OkStatus();
}

}  // namespace millipede
