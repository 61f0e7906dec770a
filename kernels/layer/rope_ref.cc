#include <algorithm>
#include <cmath>
#include <numbers>

#include "kernels/layer/rope.h"

namespace millipede {
namespace {

// HF: 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim)), all in fp32. The exponent and the
// reciprocal are rounded to fp32 exactly as torch does; the power is computed in double and
// rounded once, which is within an ulp of torch's fp32 pow.
std::vector<float> DefaultInvFreq(int64_t head_dim, double base) {
  const float base_f = static_cast<float>(base);
  std::vector<float> inv_freq(head_dim / 2);
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    const float power = static_cast<float>(std::pow(static_cast<double>(base_f), exponent));
    inv_freq[i] = 1.0f / power;
  }
  return inv_freq;
}

// HF _compute_llama3_parameters, with its fp32 tensor arithmetic (python scalars are rounded to
// fp32 when they meet an fp32 tensor).
void ApplyLlama3(const RopeScaling& s, std::vector<float>& inv_freq) {
  const double old_context_len = static_cast<double>(s.original_max_position_embeddings);
  const float low_freq_wavelen = static_cast<float>(old_context_len / s.low_freq_factor);
  const float high_freq_wavelen = static_cast<float>(old_context_len / s.high_freq_factor);
  const float factor = static_cast<float>(s.factor);
  const float low_freq_factor = static_cast<float>(s.low_freq_factor);
  const float band = static_cast<float>(s.high_freq_factor - s.low_freq_factor);
  const float two_pi = static_cast<float>(2.0 * std::numbers::pi);
  for (float& f : inv_freq) {
    const float wavelen = two_pi / f;
    if (wavelen > low_freq_wavelen) {
      f = f / factor;
    } else if (!(wavelen < high_freq_wavelen)) {
      const float smooth = (static_cast<float>(old_context_len) / wavelen - low_freq_factor) / band;
      f = (1.0f - smooth) * f / factor + smooth * f;
    }
  }
}

}  // namespace

StatusOr<std::vector<float>> RopeInvFreq(int64_t head_dim, double theta, const RopeScaling& scaling,
                                         int64_t max_position_embeddings, int64_t seq_len) {
  MP_REQUIRE(head_dim > 0 && head_dim % 2 == 0, "rope: head_dim ", head_dim,
             " must be positive and even");
  MP_REQUIRE(theta > 0.0 && std::isfinite(theta), "rope: rope_theta ", theta,
             " must be finite and > 0");
  if (scaling.type != RopeScalingType::kNone)
    MP_REQUIRE(scaling.factor > 0.0 && std::isfinite(scaling.factor), "rope_scaling: factor ",
               scaling.factor, " must be finite and > 0");

  switch (scaling.type) {
    case RopeScalingType::kNone:
      return DefaultInvFreq(head_dim, theta);
    case RopeScalingType::kLinear: {
      std::vector<float> inv_freq = DefaultInvFreq(head_dim, theta);
      const float factor = static_cast<float>(scaling.factor);
      for (float& f : inv_freq) f /= factor;
      return inv_freq;
    }
    case RopeScalingType::kDynamic: {
      MP_REQUIRE(max_position_embeddings > 0, "rope_scaling dynamic: max_position_embeddings ",
                 max_position_embeddings, " must be > 0");
      MP_REQUIRE(head_dim > 2, "rope_scaling dynamic: head_dim ", head_dim, " must be > 2");
      // HF recomputes only past the trained length; at or below it the base is unchanged.
      const double len = static_cast<double>(std::max(seq_len, max_position_embeddings));
      const double dim = static_cast<double>(head_dim);
      const double base =
          theta * std::pow(scaling.factor * len / static_cast<double>(max_position_embeddings) -
                               (scaling.factor - 1.0),
                           dim / (dim - 2.0));
      return DefaultInvFreq(head_dim, base);
    }
    case RopeScalingType::kLlama3: {
      MP_REQUIRE(scaling.original_max_position_embeddings > 0,
                 "rope_scaling llama3: original_max_position_embeddings must be > 0");
      MP_REQUIRE(
          scaling.low_freq_factor > 0.0 && scaling.low_freq_factor < scaling.high_freq_factor,
          "rope_scaling llama3: need 0 < low_freq_factor < high_freq_factor, got ",
          scaling.low_freq_factor, " and ", scaling.high_freq_factor);
      std::vector<float> inv_freq = DefaultInvFreq(head_dim, theta);
      ApplyLlama3(scaling, inv_freq);
      return inv_freq;
    }
  }
  return InvalidArgumentError("rope_scaling: unknown type");
}

Status RopeCheckArgs(const RopeArgs& args) {
  MP_REQUIRE(args.x.rank() == 3, "rope x: rank ", args.x.rank(), ", expected 3");
  const int64_t n = args.x.dim(0);
  const int64_t num_heads = args.x.dim(1);
  const int64_t head_dim = args.x.dim(2);
  MP_REQUIRE(head_dim % 2 == 0, "rope x: head_dim ", head_dim, " must be even");
  const int64_t half = head_dim / 2;
  MP_RETURN_IF_ERROR(CheckTensor(args.x, "rope x", DType::kF32, Shape{n, num_heads, head_dim}));
  MP_RETURN_IF_ERROR(CheckTensor(args.positions, "rope positions", DType::kI64, Shape{n}));
  return CheckTensor(args.inv_freq, "rope inv_freq", DType::kF32, Shape{half});
}

Status RopeRef(const RopeArgs& args) {
  MP_RETURN_IF_ERROR(RopeCheckArgs(args));
  const int64_t n = args.x.dim(0);
  const int64_t num_heads = args.x.dim(1);
  const int64_t head_dim = args.x.dim(2);
  const int64_t half = head_dim / 2;

  const int64_t* positions = args.positions.as<const int64_t>();
  const float* inv_freq = args.inv_freq.as<const float>();
  std::vector<float> cos_t(half), sin_t(half);
  for (int64_t t = 0; t < n; ++t) {
    // The angle is the fp32 product HF forms (position_ids.float() @ inv_freq); cos and sin of it
    // are then taken accurately, within an ulp of torch's fp32 cos/sin.
    const float position = static_cast<float>(positions[t]);
    for (int64_t i = 0; i < half; ++i) {
      const float angle = position * inv_freq[i];
      cos_t[i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      sin_t[i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
    for (int64_t h = 0; h < num_heads; ++h) {
      float* x = args.x.as<float>() + (t * num_heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float x1 = x[i];
        const float x2 = x[i + half];
        x[i] = x1 * cos_t[i] - x2 * sin_t[i];
        x[i + half] = x2 * cos_t[i] + x1 * sin_t[i];
      }
    }
  }
  return OkStatus();
}

}  // namespace millipede
