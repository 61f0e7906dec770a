#include "kernels/cpu/merge_state_cpu.h"

#include <cmath>

#include "kernels/attention/attention_state.h"
#include "kernels/cpu/parallel.h"

namespace millipede {
namespace {

using State = AttentionStateT<double>;

// Rows per work item.
constexpr int64_t kRowsPerItem = 64;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// MergeStateRef's rule for an LSE value: finite or -inf.
// `first`: the index the message gives lse[0] (a part's rows within all parts).
Status CheckLses(const float* lse, int64_t n, const char* what, int64_t first = 0) {
  for (int64_t i = 0; i < n; ++i)
    MP_REQUIRE(!std::isnan(lse[i]) && lse[i] != INFINITY, "merge_state: ", what, "[", first + i,
               "] is ", lse[i], "; an LSE must be finite or -inf");
  return OkStatus();
}

// acc = f.self * acc + f.other * part, each side read only when its factor is not 0.
void ApplyFactors(float* acc, const float* part, int64_t n, const State::Factors& f) {
  const float self = static_cast<float>(f.self), other = static_cast<float>(f.other);
  if (f.self == 0.0 && f.other == 0.0) {
    for (int64_t c = 0; c < n; ++c) acc[c] = 0.0f;
  } else if (f.self == 0.0) {
#pragma omp simd
    for (int64_t c = 0; c < n; ++c) acc[c] = other * part[c];
  } else if (f.other == 0.0) {
#pragma omp simd
    for (int64_t c = 0; c < n; ++c) acc[c] = self * acc[c];
  } else {
#pragma omp simd
    for (int64_t c = 0; c < n; ++c) acc[c] = self * acc[c] + other * part[c];
  }
}

}  // namespace

Status MergeStateCpu(const MergeStateArgs& args) {
  MP_RETURN_IF_ERROR(MergeStateCheckArgs(args));
  const int64_t num_parts = args.o_parts.dim(0), n = args.o_parts.dim(1);
  const int64_t num_heads = args.o_parts.dim(2), head_dim = args.o_parts.dim(3);
  const float* lse_parts = args.lse_parts.as<const float>();
  const int64_t rows = n * num_heads;
  const int64_t o_stride = args.part_stride > 0 ? args.part_stride : rows * head_dim;
  const int64_t lse_stride = args.part_stride > 0 ? args.part_stride : rows;
  for (int64_t p = 0; p < num_parts; ++p)
    MP_RETURN_IF_ERROR(CheckLses(lse_parts + p * lse_stride, rows, "lse_parts", p * rows));
  const double work = static_cast<double>(rows) * static_cast<double>(num_parts) * head_dim * 3;
  cpu::ParallelFor(CeilDiv(rows, kRowsPerItem), work, [&](int64_t item) {
    for (int64_t r = item * kRowsPerItem; r < std::min(rows, (item + 1) * kRowsPerItem); ++r) {
      State state = State::Empty();
      float* o = args.o.as<float>() + r * head_dim;
      for (int64_t p = 0; p < num_parts; ++p) {
        const State::Factors f = state.Merge(State::FromLse(lse_parts[p * lse_stride + r]));
        ApplyFactors(o, args.o_parts.as<const float>() + p * o_stride + r * head_dim, head_dim,
                     f);
      }
      if (state.IsEmpty()) std::fill_n(o, head_dim, 0.0f);
      const float out_scale = static_cast<float>(state.OutputScale());
#pragma omp simd
      for (int64_t c = 0; c < head_dim; ++c) o[c] *= out_scale;
      args.lse.as<float>()[r] = static_cast<float>(state.Lse());
    }
  });
  return OkStatus();
}

Status MergeStateInPlaceCpu(TensorView o, TensorView lse, ConstTensorView o_other,
                            ConstTensorView lse_other) {
  MP_RETURN_IF_ERROR(MergeStateInPlaceCheckArgs(o, lse, o_other, lse_other));
  const int64_t rows = lse.NumElements(), head_dim = o.dim(2);
  MP_RETURN_IF_ERROR(CheckLses(lse.as<const float>(), rows, "lse"));
  MP_RETURN_IF_ERROR(CheckLses(lse_other.as<const float>(), rows, "lse_other"));
  const double work = static_cast<double>(rows) * head_dim * 3;
  cpu::ParallelFor(CeilDiv(rows, kRowsPerItem), work, [&](int64_t item) {
    for (int64_t r = item * kRowsPerItem; r < std::min(rows, (item + 1) * kRowsPerItem); ++r) {
      float& lse_r = lse.as<float>()[r];
      State state = State::FromLse(lse_r);
      const State::Factors f = state.Merge(State::FromLse(lse_other.as<const float>()[r]));
      float* o_r = o.as<float>() + r * head_dim;
      ApplyFactors(o_r, o_other.as<const float>() + r * head_dim, head_dim, f);
      const float out_scale = static_cast<float>(state.OutputScale());
#pragma omp simd
      for (int64_t c = 0; c < head_dim; ++c) o_r[c] *= out_scale;
      lse_r = static_cast<float>(state.Lse());
    }
  });
  return OkStatus();
}

}  // namespace millipede
