// XAttention's block selection (Xu et al., 2025): each query block scores every causal key block
// by strided anti-diagonal sums of its attention scores and keeps the fewest key blocks that hold
// a given share of its attention mass. The kept blocks become an index by block_mask_index.h.
//
// Per query head h (KV head g = h / group), query block qb (positions [qb * B, (qb + 1) * B),
// B = block) and stride S (S divides B; R = B / S reshaped rows per block):
//  - reshaped query row a (0 <= a < R; global row A = qb * R + a) against reshaped key row b
//    pairs query position qb * B + a * S + S - 1 - j with key position b * S + j, j = 0..S-1:
//    one anti-diagonal of the S x S sub-block of attention scores at (A, b),
//      s(a, b) = scale / S * sum_j q_h[qb * B + a * S + S - 1 - j] . k_g[b * S + j],
//    where a query position that q does not hold, or a key position >= length, adds 0;
//  - row a takes part when q holds one of its positions; its keys are the rows b <= A with
//    b * S < length, and p(a, b) is the softmax of s(a, .) over them;
//  - mass_h(qb, kb) = sum of p(a, b) over the taking-part rows a and the rows b in key block kb
//    (b * S / B == kb), divided by the number of taking-part rows; mass(g, qb, kb) is the mean of
//    mass_h over the query heads of g. Every query block with a position in q is scored.
// The call writes the rows of `kept` (and `mass`) of the scored blocks of the KV heads with
// permille > 0, and leaves every other row as it is: so calls over different query blocks (a
// rank's own queries, then blocks it shares with other ranks) fill one bitmap.
// Selection (AntidiagonalKeep): key block 0 and the diagonal block qb are always kept; then, in
// exact arithmetic over masses rounded to fixed point (u = round(mass * 2^40), U = sum of u over
// kb <= qb, target = ceil(permille / 1000 * U)), every other block with u >= v for the largest v
// such that the forced blocks' u plus those blocks' u reach the target (ties kept together; the
// forced blocks alone may reach it). permille >= 1000 keeps every block kb <= qb.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

struct AntidiagonalSelectArgs {
  ConstTensorView q;       // [n_q, heads, head_dim] F32, BF16 or F16 queries (after RoPE)
  ConstTensorView q_runs;  // [n_runs, 3] I64: q's rows by position (sparse_index.h's key layout)
  ConstTensorView k;       // [n_k, kv_heads, head_dim] F32, BF16, F16 or F8_E4M3 keys
  // [n_runs, 3] I64 layout of k: every position in [0, min(length, (last qb + 1) * B)), where
  // the last qb is the last query block scored, is held.
  ConstTensorView k_runs;
  int64_t length = 0;  // keys at positions >= length are absent; > every query position
  int64_t block = 128;
  int64_t stride = 8;
  float scale = 1.0f;  // the attention scale (1 / sqrt(head_dim))
  // [kv_heads] host memory: the mass threshold in thousandths per KV head; 0: the head is not
  // selected here (its rows are not written).
  const int64_t* permille = nullptr;
  int64_t qb_begin = 0;  // the query block of row 0 of `kept` and `mass`
  // [kv_heads, n_qb, words] I32, words >= num_kb / 32 + 1 where num_kb = ceil(length / B):
  // the kept bitmaps (block_mask_index.h); bits after qb are 0.
  TensorView kept;
  // Optional (data null: not written) [kv_heads, n_qb, num_kb] F32: mass(g, qb, kb); 0 beyond
  // kb = qb.
  TensorView mass;
};

Status AntidiagonalSelectCheckArgs(const AntidiagonalSelectArgs& args);
// Scores in double, rounded to float masses before the selection.
Status AntidiagonalSelectRef(const AntidiagonalSelectArgs& args);

// The selection of one row: `mass` [qb + 1] of query block qb; returns the kept key blocks in
// increasing order. The CUDA form selects the same blocks from the same float masses.
std::vector<int64_t> AntidiagonalKeep(std::span<const float> mass, int64_t qb, int64_t permille);

}  // namespace millipede
