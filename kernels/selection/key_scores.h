// How much attention each key receives from a set of observed queries (H2O-style static eviction,
// MInference's vertical columns; optionally also each diagonal, its slash lines):
// per KV head, the sum over the queries and the query heads that read it of the softmax
// probability they give the key. The probabilities are normalised by a log-sum-exp the caller
// computed over every key (under context parallelism: over every rank's keys), so the scores of
// keys held by different ranks add up as if one rank held them all.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

struct KeyScoresArgs {
  // [n_q, num_heads, head_dim] F32 (after RoPE): the observed queries.
  ConstTensorView q;
  // [n_q] I64: each query's global position.
  ConstTensorView q_pos;
  // [n_k, num_kv_heads, head_dim] F32, BF16 or F16 (after RoPE). num_heads must be a multiple
  // of num_kv_heads: query head h reads KV head h / (num_heads / num_kv_heads).
  ConstTensorView k;
  // [n_k] I64: each key's global position (any order; a query sees keys at positions <= its own).
  ConstTensorView k_pos;
  // [n_q, num_heads] F32, natural log: log sum_j exp(scale * q.k_j) over every key the query
  // sees. -inf (a query that sees no key) contributes nothing; NaN and +inf are errors.
  ConstTensorView lse;
  // Softmax scale applied to q.k. 0 (the default) means 1 / sqrt(head_dim); otherwise it must be
  // finite and > 0.
  float scale = 0.0f;
  // [num_kv_heads, n_k] F32: score[g, j] = sum over queries t with k_pos[j] <= q_pos[t] and
  // query heads h of KV head g of exp(scale * q[t, h] . k[j, g] - lse[t, h]). 0 for a key no
  // query sees (n_q == 0: all zeros).
  TensorView score;
  // Optional [num_kv_heads, n_diag] F32, the same probabilities summed by diagonal instead of by
  // key (MInference's slash scores): diag_score[g, d] = sum of the terms above with
  // q_pos[t] - k_pos[j] == d, for 0 <= d < n_diag (terms with larger d are left out). Written
  // (overwritten) only when diag_score.data != nullptr.
  TensorView diag_score;
};

// Checks KeyScoresArgs' shapes, dtypes and scale (not the data, which may live on a device).
Status KeyScoresCheckArgs(const KeyScoresArgs& args);

// Computes score (and diag_score when given), accumulating in double (the oracle for fp32
// kernels).
Status KeyScoresRef(const KeyScoresArgs& args);

}  // namespace millipede
