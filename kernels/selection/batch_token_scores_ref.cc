#include <cmath>
#include <limits>
#include <vector>

#include "kernels/selection/batch_token_scores.h"
#include "kernels/selection/token_scores.h"

namespace millipede {

Status BatchTokenScoresCheckArgs(const BatchTokenScoresArgs& args) {
  MP_REQUIRE(args.q.rank() == 3, "batch_token_scores q: rank ", args.q.rank(), ", expected 3");
  const int64_t queries = args.q.dim(0), num_heads = args.q.dim(1), head_dim = args.q.dim(2);
  MP_RETURN_IF_ERROR(CheckTensor(args.q, "batch_token_scores q", DType::kF32,
                                 Shape{queries, num_heads, head_dim}));
  MP_RETURN_IF_ERROR(
      CheckTensor(args.lse, "batch_token_scores lse", DType::kF32, Shape{queries, num_heads}));
  const int64_t entries = static_cast<int64_t>(args.k.size());
  MP_REQUIRE(args.q_rows.size() == args.k.size(), "batch_token_scores: ", args.q_rows.size(),
             " query rows for ", entries, " entries");
  MP_REQUIRE(args.score.rank() == 3, "batch_token_scores score: rank ", args.score.rank(),
             ", expected 3");
  MP_REQUIRE(args.score.dim(0) == entries, "batch_token_scores score: ", args.score.dim(0),
             " entries, expected ", entries);
  const int64_t num_kv_heads = args.score.dim(1), cols = args.score.dim(2);
  MP_REQUIRE(num_kv_heads > 0 && num_heads % num_kv_heads == 0, "batch_token_scores: num_heads ",
             num_heads, " is not a multiple of num_kv_heads ", num_kv_heads);
  MP_RETURN_IF_ERROR(CheckTensor(args.score, "batch_token_scores score", DType::kF32,
                                 Shape{entries, num_kv_heads, cols}));
  const DType dtype = entries > 0 ? args.k[0].dtype : DType::kF32;
  for (int64_t e = 0; e < entries; ++e) {
    const ConstTensorView& k = args.k[static_cast<size_t>(e)];
    MP_REQUIRE(k.rank() == 3, "batch_token_scores k[", e, "]: rank ", k.rank(), ", expected 3");
    MP_REQUIRE(k.dtype == dtype, "batch_token_scores k[", e, "]: dtype ", DTypeName(k.dtype),
               ", expected ", DTypeName(dtype), " as entry 0's");
    MP_RETURN_IF_ERROR(
        CheckTensor(k, "batch_token_scores k", dtype, Shape{k.dim(0), num_kv_heads, head_dim}));
    MP_REQUIRE(k.dim(0) <= cols, "batch_token_scores k[", e, "]: ", k.dim(0),
               " keys exceed the score's ", cols, " columns");
    const int32_t row = args.q_rows[static_cast<size_t>(e)];
    MP_REQUIRE(row >= 0 && row < queries, "batch_token_scores: entry ", e, " reads query row ", row,
               " of ", queries);
  }
  // The dtype, head_dim and scale rules are TokenScores' own.
  if (entries == 0) return OkStatus();
  const ConstTensorView q0{args.q.data, DType::kF32, Shape{num_heads, head_dim}};
  const ConstTensorView lse0{args.lse.data, DType::kF32, Shape{num_heads}};
  const ConstTensorView k0{args.k[0].data, dtype, Shape{0, num_kv_heads, head_dim}};
  TensorView score0{args.score.data, DType::kF32, Shape{num_kv_heads, 0}};
  return TokenScoresCheckArgs({q0, k0, lse0, args.scale, score0});
}

Status BatchTokenScoresRef(const BatchTokenScoresArgs& args) {
  MP_RETURN_IF_ERROR(BatchTokenScoresCheckArgs(args));
  const int64_t num_heads = args.q.dim(1), head_dim = args.q.dim(2);
  const int64_t num_kv_heads = args.score.dim(1), cols = args.score.dim(2);
  const float* q = args.q.as<const float>();
  const float* lse = args.lse.as<const float>();
  float* score = args.score.as<float>();
  // The entries' rows first, so that a bad lse leaves the output untouched.
  for (const int32_t row : args.q_rows)
    for (int64_t h = 0; h < num_heads; ++h) {
      const float l = lse[row * num_heads + h];
      MP_REQUIRE(!std::isnan(l) && l != std::numeric_limits<float>::infinity(),
                 "batch_token_scores: lse[", row, ", ", h, "] is ", l,
                 "; an LSE must be finite or -inf");
    }
  std::vector<float> one;
  for (size_t e = 0; e < args.k.size(); ++e) {
    const ConstTensorView& k = args.k[e];
    const int64_t n = k.dim(0), row = args.q_rows[e];
    one.assign(static_cast<size_t>(num_kv_heads * n), 0.0f);
    MP_RETURN_IF_ERROR(
        TokenScoresRef({{q + row * num_heads * head_dim, DType::kF32, Shape{num_heads, head_dim}},
                        k,
                        {lse + row * num_heads, DType::kF32, Shape{num_heads}},
                        args.scale,
                        {one.data(), DType::kF32, Shape{num_kv_heads, n}}}));
    float* out = score + static_cast<int64_t>(e) * num_kv_heads * cols;
    for (int64_t g = 0; g < num_kv_heads; ++g)
      for (int64_t j = 0; j < cols; ++j)
        out[g * cols + j] = j < n ? one[g * n + j] : std::numeric_limits<float>::quiet_NaN();
  }
  return OkStatus();
}

}  // namespace millipede
