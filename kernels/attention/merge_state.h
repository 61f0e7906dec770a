// Merges partial attention results over disjoint key sets (split-KV decode, ring-attention steps,
// cross-rank merges) with the log-sum-exp rule of kernels/attention_state.h.
#pragma once

#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

struct MergeStateArgs {
  // [num_parts, n, num_heads, head_dim] F32: each part's normalised output. An empty part's rows
  // are never read (they may hold anything).
  ConstTensorView o_parts;
  // [num_parts, n, num_heads] F32: each part's natural-log LSE; -inf marks an empty part.
  // NaN and +inf are errors.
  ConstTensorView lse_parts;
  // [n, num_heads, head_dim] F32: the merged output; 0 where every part is empty.
  TensorView o;
  // [n, num_heads] F32: the merged natural-log LSE; -inf where every part is empty.
  TensorView lse;
  // Elements (F32) from one part to the next, in o_parts and in lse_parts alike; 0: the parts
  // are packed as their shapes say (n * num_heads * head_dim and n * num_heads apart). Partials
  // all-gathered from several ranks as one buffer per rank, o then lse, merge where they lie: the
  // stride is one rank's buffer, lse_parts starts after the first rank's o. When set, at least
  // n * num_heads * head_dim.
  int64_t part_stride = 0;
};

// Checks MergeStateArgs' shapes and dtypes (not the data, which may live on a device).
Status MergeStateCheckArgs(const MergeStateArgs& args);

// o = sum_p exp(lse_p - lse) * o_p with lse = log(sum_p exp(lse_p)). num_parts may be 0.
// The outputs must not overlap the inputs.
Status MergeStateRef(const MergeStateArgs& args);

// Two-operand in-place form for accumulating ring steps: (o, lse) becomes the merge of itself
// with (o_other, lse_other). Start from o = anything, lse = -inf (the empty state).
//   o, o_other:     [n, num_heads, head_dim] F32
//   lse, lse_other: [n, num_heads] F32, natural log
Status MergeStateInPlaceRef(TensorView o, TensorView lse, ConstTensorView o_other,
                            ConstTensorView lse_other);
// Checks the in-place form's shapes and dtypes (not the data, which may live on a device).
Status MergeStateInPlaceCheckArgs(TensorView o, TensorView lse, ConstTensorView o_other,
                                  ConstTensorView lse_other);

}  // namespace millipede
