#include "kernels/cpu/rope_cpu.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vector_math.h"

namespace millipede {
namespace cpu {

void RopeAngles(int64_t position, const float* inv_freq, int64_t half, float* cos_t, float* sin_t) {
  const float p = static_cast<float>(position);
  for (int64_t i = 0; i < half; ++i) {
    const float angle = p * inv_freq[i];
    cos_t[i] = static_cast<float>(std::cos(static_cast<double>(angle)));
    sin_t[i] = static_cast<float>(std::sin(static_cast<double>(angle)));
  }
}

MP_CPU_CLONES void RopeRotate(float* x, int64_t num_heads, int64_t half, const float* cos_t,
                              const float* sin_t) {
  for (int64_t h = 0; h < num_heads; ++h) {
    float* head = x + h * 2 * half;
#pragma omp simd
    for (int64_t i = 0; i < half; ++i) {
      const float x1 = head[i], x2 = head[i + half];
      head[i] = x1 * cos_t[i] - x2 * sin_t[i];
      head[i + half] = x2 * cos_t[i] + x1 * sin_t[i];
    }
  }
}

}  // namespace cpu

Status RopeCpu(const RopeArgs& args) {
  MP_RETURN_IF_ERROR(RopeCheckArgs(args));
  const int64_t n = args.x.dim(0), num_heads = args.x.dim(1), half = args.x.dim(2) / 2;
  const int64_t* positions = args.positions.as<const int64_t>();
  const float* inv_freq = args.inv_freq.as<const float>();
  constexpr int64_t kRowsPerItem = 16;
  // Two double-precision trig calls per pair and row dominate for few heads.
  const double work = static_cast<double>(n) * half * (40.0 + 6.0 * num_heads);
  cpu::ParallelFor((n + kRowsPerItem - 1) / kRowsPerItem, work, [&](int64_t item) {
    thread_local std::vector<float> cos_t, sin_t;
    cos_t.resize(static_cast<size_t>(half));
    sin_t.resize(static_cast<size_t>(half));
    for (int64_t t = item * kRowsPerItem; t < std::min(n, (item + 1) * kRowsPerItem); ++t) {
      cpu::RopeAngles(positions[t], inv_freq, half, cos_t.data(), sin_t.data());
      cpu::RopeRotate(args.x.as<float>() + t * num_heads * 2 * half, num_heads, half, cos_t.data(),
                      sin_t.data());
    }
  });
  return OkStatus();
}

}  // namespace millipede
