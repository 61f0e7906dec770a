#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/memory/float_rows.h"
#include "kernels/selection/token_scores.h"

namespace millipede {

Status TokenScoresCheckArgs(const TokenScoresArgs& args) {
  MP_REQUIRE(args.q.rank() == 2, "token_scores q: rank ", args.q.rank(), ", expected 2");
  MP_REQUIRE(args.k.rank() == 3, "token_scores k: rank ", args.k.rank(), ", expected 3");
  const int64_t num_heads = args.q.dim(0), head_dim = args.q.dim(1);
  const int64_t n_k = args.k.dim(0), num_kv_heads = args.k.dim(1);
  MP_REQUIRE(head_dim > 0, "token_scores: head_dim must be positive");
  MP_REQUIRE(num_kv_heads > 0 && num_heads % num_kv_heads == 0, "token_scores: num_heads ",
             num_heads, " is not a multiple of num_kv_heads ", num_kv_heads);
  MP_RETURN_IF_ERROR(
      CheckTensor(args.q, "token_scores q", DType::kF32, Shape{num_heads, head_dim}));
  MP_REQUIRE(IsKvDType(args.k.dtype), "token_scores k: dtype ", DTypeName(args.k.dtype),
             ", expected F32, BF16, F16 or F8_E4M3");
  MP_RETURN_IF_ERROR(
      CheckTensor(args.k, "token_scores k", args.k.dtype, Shape{n_k, num_kv_heads, head_dim}));
  MP_RETURN_IF_ERROR(CheckTensor(args.lse, "token_scores lse", DType::kF32, Shape{num_heads}));
  MP_RETURN_IF_ERROR(
      CheckTensor(args.score, "token_scores score", DType::kF32, Shape{num_kv_heads, n_k}));
  MP_REQUIRE(args.scale == 0.0f || (args.scale > 0.0f && std::isfinite(args.scale)),
             "token_scores: scale ", args.scale, " must be 0 (meaning 1/sqrt(head_dim)) or > 0");
  return OkStatus();
}

Status TokenScoresRef(const TokenScoresArgs& args) {
  MP_RETURN_IF_ERROR(TokenScoresCheckArgs(args));
  const int64_t num_heads = args.q.dim(0), head_dim = args.q.dim(1);
  const int64_t n_k = args.k.dim(0), num_kv_heads = args.k.dim(1);
  const int64_t group = num_heads / num_kv_heads;
  const double scale =
      args.scale == 0.0f ? 1.0 / std::sqrt(static_cast<double>(head_dim)) : args.scale;
  const float* q = args.q.as<const float>();
  const float* lse = args.lse.as<const float>();
  for (int64_t h = 0; h < num_heads; ++h)
    MP_REQUIRE(!std::isnan(lse[h]) && lse[h] != std::numeric_limits<float>::infinity(),
               "token_scores: lse[", h, "] is ", lse[h], "; an LSE must be finite or -inf");

  std::vector<float> key(static_cast<size_t>(head_dim));
  float* score = args.score.as<float>();
  for (int64_t g = 0; g < num_kv_heads; ++g) {
    for (int64_t j = 0; j < n_k; ++j) {
      LoadFloatRow(args.k.data, args.k.dtype, (j * num_kv_heads + g) * head_dim, head_dim,
                   key.data());
      // The largest log-probability; exp of it at the end (exp is monotonic).
      double best = -std::numeric_limits<double>::infinity();
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        if (std::isinf(lse[h])) continue;  // -inf: the head sees no key at all
        const float* qv = q + h * head_dim;
        double dot = 0.0;
        for (int64_t i = 0; i < head_dim; ++i) dot += static_cast<double>(qv[i]) * key[i];
        best = std::max(best, scale * dot - lse[h]);
      }
      score[g * n_k + j] = static_cast<float>(std::exp(best));
    }
  }
  return OkStatus();
}

}  // namespace millipede
