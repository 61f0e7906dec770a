#include "kernels/cpu/rope_kv_cpu.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/rope_cpu.h"
#include "kernels/cpu/vector_math.h"

namespace millipede {

Status RopeKvCpu(const RopeKvArgs& args) {
  MP_RETURN_IF_ERROR(RopeKvCheckArgs(args));
  // A few decode tokens, each stored in its own cache.
  if (!args.k_rows.empty()) return RopeKvByRow(args, RopeCpu, RopeKvCpu);
  const int64_t n = args.q.dim(0), num_q_heads = args.q.dim(1), head_dim = args.q.dim(2);
  const int64_t num_kv_heads = args.k.dim(1), half = head_dim / 2;
  const int64_t kv_row = num_kv_heads * head_dim;
  const int64_t* positions = args.positions.as<const int64_t>();
  const float* inv_freq = args.inv_freq.as<const float>();
  constexpr int64_t kRowsPerItem = 16;
  const double work = static_cast<double>(n) * half * (40.0 + 6.0 * (num_q_heads + num_kv_heads));
  cpu::ParallelFor((n + kRowsPerItem - 1) / kRowsPerItem, work, [&](int64_t item) {
    thread_local std::vector<float> cos_t, sin_t, k;
    cos_t.resize(static_cast<size_t>(half));
    sin_t.resize(static_cast<size_t>(half));
    k.resize(static_cast<size_t>(kv_row));
    for (int64_t t = item * kRowsPerItem; t < std::min(n, (item + 1) * kRowsPerItem); ++t) {
      cpu::RopeAngles(positions[t], inv_freq, half, cos_t.data(), sin_t.data());
      cpu::RopeRotate(args.q.as<float>() + t * num_q_heads * head_dim, num_q_heads, half,
                      cos_t.data(), sin_t.data());
      // The keys are rotated in a copy: the op leaves its inputs as they are.
      std::copy_n(args.k.as<const float>() + t * kv_row, kv_row, k.data());
      cpu::RopeRotate(k.data(), num_kv_heads, half, cos_t.data(), sin_t.data());
      cpu::NarrowRow(k.data(), kv_row, args.k_cache.data, args.k_cache.dtype, t * kv_row);
      cpu::NarrowRow(args.v.as<const float>() + t * kv_row, kv_row, args.v_cache.data,
                     args.v_cache.dtype, t * kv_row);
    }
  });
  return OkStatus();
}

}  // namespace millipede
