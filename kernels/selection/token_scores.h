// How much one decode query attends to each key, per KV head: OmniKV's last-token selector. For
// each KV head, the largest softmax probability any of the query heads reading it gives the key.
// The probabilities are normalised by a log-sum-exp the caller computed over every key the query
// sees (under context parallelism: over every rank's keys, after the cross-rank merge), so the
// scores of keys held by different ranks compare as if one rank held them all.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

struct TokenScoresArgs {
  // [num_heads, head_dim] F32 (after RoPE): the one query, every head.
  ConstTensorView q;
  // [n_k, num_kv_heads, head_dim] F32, BF16 or F16 (after RoPE): the keys to score, all visible
  // to the query. num_heads must be a multiple of num_kv_heads: query head h reads KV head
  // h / (num_heads / num_kv_heads).
  ConstTensorView k;
  // [num_heads] F32, natural log: log sum_j exp(scale * q_h . k_j) over every key query head h
  // sees (these and others). -inf (a head that sees no key) contributes nothing; NaN and +inf
  // are errors.
  ConstTensorView lse;
  // Softmax scale applied to q.k. 0 (the default) means 1 / sqrt(head_dim); otherwise it must be
  // finite and > 0.
  float scale = 0.0f;
  // [num_kv_heads, n_k] F32: score[g, j] = max over the query heads h of KV head g of
  // exp(scale * q[h] . k[j, g] - lse[h]); 0 when every such head has lse -inf. n_k == 0: nothing
  // to write.
  TensorView score;
};

// Checks TokenScoresArgs' shapes, dtypes and scale (not the data, which may live on a device).
Status TokenScoresCheckArgs(const TokenScoresArgs& args);

// Computes score, the dot products accumulated in double (the oracle for fp32 kernels). Checks
// the lse values.
Status TokenScoresRef(const TokenScoresArgs& args);

}  // namespace millipede
