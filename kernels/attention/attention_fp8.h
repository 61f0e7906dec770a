// FP8 prefill attention, an opt-in precision (a policy's "fp8_attention"): AttentionArgs'
// contract (causal or unmasked, offsets, GQA, o and LSE) with both products on E4M3 operands, as
// FlashAttention-3's FP8 path computes them. What it computes (AttentionFp8Ref exactly; the
// Hopper kernel up to fp32 summation order, its exp2 and split-KV):
//  - each query row (per head) rounded to E4M3 with its own scale, its largest |q| / 448;
//  - K and V as Fp8AttentionOperandsRef rounds them (K per KV head and 128-key block, V per KV
//    head and channel);
//  - scores x_j = scale * q_scale * k_scale(block of j) * (q8 . k8_j), summed exactly;
//  - over the 128-key blocks in order, an online softmax: m = max(m, the block's largest x),
//    P_j = E4M3(256 exp(x_j - m)) for P V (256 keeps small probabilities out of E4M3's
//    subnormals), the denominator from the unrounded exp(x_j - m);
//  - o = (sum_j P_j v8_j) * v_scale / (256 d), lse = m + log d (natural log).
// A-shape windows, evicted rows and per-head key counts are not taken (Unimplemented).
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "kernels/attention/attention.h"

namespace millipede {

// AttentionCheckArgs, then what FP8 attention does not take, and K/V of F32, BF16 or F16.
Status AttentionFp8CheckArgs(const AttentionArgs& args);
// Computes o and lse as above. Every element of o (and lse) is written.
Status AttentionFp8Ref(const AttentionArgs& args);

// AttentionFp8Ref in its two halves, for the CPU backend's threaded form
// (kernels/cpu/attention_fp8_cpu): a call's K and V rounded once, then query rows over them.
struct Fp8AttentionHostOperands {
  int64_t blocks = 0;          // 128-key blocks
  std::vector<float> k8;       // [n_kv, num_kv_heads, head_dim] E4M3 values (scales apart)
  std::vector<float> k_scale;  // [num_kv_heads, blocks]
  std::vector<float> v8;       // [num_kv_heads, n_kv, head_dim] E4M3 values, keys in order
  std::vector<float> v_scale;  // [num_kv_heads, head_dim]
};
// Checks `args` (AttentionFp8CheckArgs) and rounds its K and V (Fp8AttentionOperandsRef).
StatusOr<Fp8AttentionHostOperands> Fp8AttentionHostOperandsRef(const AttentionArgs& args);
// Rows [row_begin, row_end) of args.q (checked args, `ops` made from them): their o and lse.
void AttentionFp8RowsRef(const AttentionArgs& args, const Fp8AttentionHostOperands& ops,
                         int64_t row_begin, int64_t row_end);

}  // namespace millipede
