// OmniKV's token scores (token_scores.h) of many decode tokens in one call: entry e scores its
// own keys with its token's query and log-sum-exp, and the entries' scores land in one matrix,
// padded with NaN, that one TopK call (top_k.h) cuts row by row: the filter layers of every
// sequence of a continuous-batching step select their tokens in three launches, not three per
// sequence.
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

struct BatchTokenScoresArgs {
  // [queries, num_heads, head_dim] F32 (after RoPE): the decode tokens' queries.
  ConstTensorView q;
  // [queries, num_heads] F32, natural log: each query's log-sum-exp over every key it sees, as
  // TokenScoresArgs::lse (finite or -inf).
  ConstTensorView lse;
  // Entries, entry e [n_e, num_kv_heads, head_dim] (after RoPE): its keys, all visible to its
  // query. Every entry shares num_kv_heads, head_dim and the dtype (F32, BF16 or F16); n_e may
  // differ and may be 0. num_heads must be a multiple of num_kv_heads.
  std::span<const ConstTensorView> k;
  // Entry e's row of q and lse, each in [0, queries); host memory, one per entry.
  std::span<const int32_t> q_rows;
  // As TokenScoresArgs::scale: 0 means 1 / sqrt(head_dim), else finite and > 0.
  float scale = 0.0f;
  // [entries, num_kv_heads, cols] F32, cols at least every n_e: score[e, g, j] for j < n_e is
  // TokenScores of entry e (its query row over its keys), and NaN for n_e <= j < cols (a column
  // TopK never selects).
  TensorView score;
};

// Checks BatchTokenScoresArgs' shapes, dtypes, rows and scale (not the data, which may live on a
// device).
Status BatchTokenScoresCheckArgs(const BatchTokenScoresArgs& args);

// Writes score entry by entry with TokenScoresRef (the oracle for the GPU kernel). Checks the lse
// values of the rows the entries read.
Status BatchTokenScoresRef(const BatchTokenScoresArgs& args);

}  // namespace millipede
