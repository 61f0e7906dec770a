#include <cmath>
#include <limits>
#include <vector>

#include "kernels/memory/float_rows.h"
#include "kernels/selection/key_scores.h"

namespace millipede {

Status KeyScoresCheckArgs(const KeyScoresArgs& args) {
  MP_REQUIRE(args.q.rank() == 3, "key_scores q: rank ", args.q.rank(), ", expected 3");
  MP_REQUIRE(args.k.rank() == 3, "key_scores k: rank ", args.k.rank(), ", expected 3");
  const int64_t n_q = args.q.dim(0), num_heads = args.q.dim(1), head_dim = args.q.dim(2);
  const int64_t n_k = args.k.dim(0), num_kv_heads = args.k.dim(1);
  MP_REQUIRE(head_dim > 0, "key_scores: head_dim must be positive");
  MP_REQUIRE(num_kv_heads > 0 && num_heads % num_kv_heads == 0, "key_scores: num_heads ", num_heads,
             " is not a multiple of num_kv_heads ", num_kv_heads);
  MP_RETURN_IF_ERROR(
      CheckTensor(args.q, "key_scores q", DType::kF32, Shape{n_q, num_heads, head_dim}));
  MP_REQUIRE(IsKvDType(args.k.dtype), "key_scores k: dtype ", DTypeName(args.k.dtype),
             ", expected F32, BF16, F16 or F8_E4M3");
  MP_RETURN_IF_ERROR(
      CheckTensor(args.k, "key_scores k", args.k.dtype, Shape{n_k, num_kv_heads, head_dim}));
  MP_RETURN_IF_ERROR(CheckTensor(args.q_pos, "key_scores q_pos", DType::kI64, Shape{n_q}));
  MP_RETURN_IF_ERROR(CheckTensor(args.k_pos, "key_scores k_pos", DType::kI64, Shape{n_k}));
  MP_RETURN_IF_ERROR(CheckTensor(args.lse, "key_scores lse", DType::kF32, Shape{n_q, num_heads}));
  MP_RETURN_IF_ERROR(
      CheckTensor(args.score, "key_scores score", DType::kF32, Shape{num_kv_heads, n_k}));
  if (args.diag_score.data != nullptr) {
    MP_REQUIRE(args.diag_score.rank() == 2, "key_scores diag_score: rank ", args.diag_score.rank(),
               ", expected 2");
    MP_RETURN_IF_ERROR(CheckTensor(args.diag_score, "key_scores diag_score", DType::kF32,
                                   Shape{num_kv_heads, args.diag_score.dim(1)}));
  }
  MP_REQUIRE(args.scale == 0.0f || (args.scale > 0.0f && std::isfinite(args.scale)),
             "key_scores: scale ", args.scale, " must be 0 (meaning 1/sqrt(head_dim)) or > 0");
  return OkStatus();
}

Status KeyScoresRef(const KeyScoresArgs& args) {
  MP_RETURN_IF_ERROR(KeyScoresCheckArgs(args));
  const int64_t n_q = args.q.dim(0), num_heads = args.q.dim(1), head_dim = args.q.dim(2);
  const int64_t n_k = args.k.dim(0), num_kv_heads = args.k.dim(1);
  const int64_t group = num_heads / num_kv_heads;
  const double scale =
      args.scale == 0.0f ? 1.0 / std::sqrt(static_cast<double>(head_dim)) : args.scale;
  const float* q = args.q.as<const float>();
  const int64_t* q_pos = args.q_pos.as<const int64_t>();
  const int64_t* k_pos = args.k_pos.as<const int64_t>();
  const float* lse = args.lse.as<const float>();
  for (int64_t i = 0; i < n_q * num_heads; ++i)
    MP_REQUIRE(!std::isnan(lse[i]) && lse[i] != std::numeric_limits<float>::infinity(),
               "key_scores: lse[", i, "] is ", lse[i], "; an LSE must be finite or -inf");

  std::vector<float> key(static_cast<size_t>(head_dim));
  float* score = args.score.as<float>();
  const int64_t n_diag = args.diag_score.data != nullptr ? args.diag_score.dim(1) : 0;
  std::vector<double> diag(static_cast<size_t>(num_kv_heads * n_diag), 0.0);
  for (int64_t g = 0; g < num_kv_heads; ++g) {
    for (int64_t j = 0; j < n_k; ++j) {
      LoadFloatRow(args.k.data, args.k.dtype, (j * num_kv_heads + g) * head_dim, head_dim,
                   key.data());
      double sum = 0.0;
      for (int64_t t = 0; t < n_q; ++t) {
        if (k_pos[j] > q_pos[t]) continue;
        double term = 0.0;
        for (int64_t h = g * group; h < (g + 1) * group; ++h) {
          const double row_lse = lse[t * num_heads + h];
          if (std::isinf(row_lse)) continue;  // -inf: the query sees no key at all
          const float* qv = q + (t * num_heads + h) * head_dim;
          double dot = 0.0;
          for (int64_t i = 0; i < head_dim; ++i) dot += static_cast<double>(qv[i]) * key[i];
          term += std::exp(scale * dot - row_lse);
        }
        sum += term;
        if (q_pos[t] - k_pos[j] < n_diag) diag[g * n_diag + q_pos[t] - k_pos[j]] += term;
      }
      score[g * n_k + j] = static_cast<float>(sum);
    }
  }
  for (size_t i = 0; i < diag.size(); ++i)
    args.diag_score.as<float>()[i] = static_cast<float>(diag[i]);
  return OkStatus();
}

}  // namespace millipede
