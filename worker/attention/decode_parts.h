// Decode tokens' attention over their parts (DecodeStrategy::BatchParts) in one
// BatchDecodeAttention call, a token's parts merged by log-sum-exp: the layer loop's batched run
// of many tokens, and one token of a strategy whose parts read rows through an index (which the
// single-sequence attention op does not take).
#pragma once

#include <span>
#include <vector>

#include "worker/attention/attention_strategy.h"

namespace millipede {

// q [n, heads, head_dim] F32 the tokens' queries; parts[i] token i's parts (at most
// kMaxDecodeParts); `windows` the A-shape windows of every part (DecodeStrategy::batch_windows).
// o [n, heads, head_dim] and lse [n, heads] F32: each token's attention over its parts' rows
// (o = 0, lse = -inf for a token without parts). The call's entries are part-major (entry p * n + i
// is token i's part p, or an empty one where it has fewer parts, the merge's identity);
// `parts_o` and `parts_lse` hold the parts' partials when a token has several (grown on demand,
// kept for reuse).
Status AttendParts(AttentionEnv& env, ConstTensorView q,
                   std::span<const std::vector<DecodePart>> parts,
                   const DecodeStrategy::Windows& windows, TensorView o, TensorView lse,
                   BackendTensor* parts_o, BackendTensor* parts_lse);

}  // namespace millipede
