// The last queries of a prefill step on every rank, and their log-sum-exp over every rank's keys:
// what static eviction and the vertical-slash index score keys with (MInference's last_q,
// H2O's observation window). Each observed query is held by one rank; its copy reaches the others
// through one all-reduce (the other ranks add zeros), and the log-sum-exp through one merge of
// the ranks' partial states.
#pragma once

#include <cstdint>
#include <span>

#include "worker/attention/attention_strategy.h"

namespace millipede {

class ObservedQueries {
 public:
  // Every rank's copy of the queries at positions [begin, begin + n), which must be queries of
  // this step: [n, heads, head_dim] F32.
  StatusOr<ConstTensorView> Gather(AttentionEnv& env, const PrefillInput& in, int64_t begin,
                                   int64_t n);
  // Log-sum-exp [n, heads] of queries `q` (positions begin...) over every rank's keys: this
  // rank's `rows` at positions `ranges` (causal).
  StatusOr<ConstTensorView> GlobalLse(AttentionEnv& env, ConstTensorView q, int64_t begin,
                                      ConstKvRows rows, std::span<const TokenRange> ranges);

 private:
  BackendTensor q_, acc_o_, acc_lse_, part_o_, part_lse_, all_o_, all_lse_;
};

}  // namespace millipede
