// One decode token's attention over its parts (DecodeStrategy::BatchParts) outside a batched run:
// the parts in one BatchDecodeAttention call (entries sharing the token's query row), merged by
// log-sum-exp. For strategies whose parts read rows through an index, which the single-sequence
// attention op does not take.
#pragma once

#include <span>

#include "worker/attention/attention_strategy.h"

namespace millipede {

// q [1, heads, head_dim] F32 the token's query; o [1, heads, head_dim] and lse [1, heads] F32 its
// attention over the parts' rows (o = 0, lse = -inf without parts). `parts_o` and `parts_lse`
// hold the parts' partials when there are several (grown on demand, kept for reuse).
Status AttendParts(AttentionEnv& env, ConstTensorView q, std::span<const DecodePart> parts,
                   TensorView o, TensorView lse, BackendTensor* parts_o, BackendTensor* parts_lse);

}  // namespace millipede
