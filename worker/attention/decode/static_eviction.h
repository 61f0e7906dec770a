// The static-eviction baseline (H2O-style): at the end of a prefill step the last
// `observed_queries` queries score every key by the softmax probability they give it —
// normalised over every rank's keys — and each KV head keeps its global top `keep_tokens` keys,
// agreed between the ranks (GlobalTopK); decode sees those plus the `recent_tokens` latest
// positions. Exact under context parallelism: the same keys are kept whatever the number of ranks.
//
// Built from backend ops only (attention, the merge rule, KeyScores, TopK, GatherRows), so it
// runs on any backend: the kept keys and values of each KV head are gathered once into a block of
// their own, and a decode step attends, per KV head, to its kept keys older than the window, then
// to the window's rows for all heads, merging the two by log-sum-exp.
//
// The selection is the sequence's state: one strategy object per layer of one sequence.
#pragma once

#include <cstdint>
#include <vector>

#include "policy/attention_policy.h"
#include "worker/attention/attention_strategy.h"
#include "worker/attention/decode/decode_role.h"
#include "worker/attention/observed_queries.h"

namespace millipede {

class StaticEvictionDecode final : public DecodeStrategy {
 public:
  explicit StaticEvictionDecode(const StaticEvictionParams& params) : params_(params) {}
  const char* name() const override { return "static-eviction"; }
  Status Partial(AttentionEnv& env, const DecodeInput& in, TensorView o, TensorView lse) override;
  Status AfterPrefill(AttentionEnv& env, const PrefillInput& in) override;

 private:
  // Each KV head's kept rows of this rank (increasing), from the scores [kv_heads, rows].
  StatusOr<std::vector<std::vector<int64_t>>> Select(AttentionEnv& env, ConstTensorView scores,
                                                     const std::vector<int64_t>& positions);
  // Gathers the kept rows' K and V, head by head, into heavy_k_ / heavy_v_.
  Status GatherKept(AttentionEnv& env, ConstKvRows rows,
                    const std::vector<std::vector<int64_t>>& kept);
  StaticEvictionParams params_;
  ObservedQueries observed_;
  BackendTensor q_pos_, k_pos_, scores_, top_index_, top_value_, gather_index_;
  BackendTensor tmp_o_, tmp_lse_;  // a decode step's window partial
  // Kept rows of every KV head, head by head: [kept rows, head_dim] each.
  BackendTensor heavy_k_, heavy_v_;
  std::vector<int64_t> head_offset_;                   // [kv_heads + 1] rows into heavy_k_
  std::vector<std::vector<int64_t>> heavy_positions_;  // [kv_heads] kept positions, increasing
};

// The static-eviction role's builder: a StaticEvictionDecode with the policy's parameters.
StatusOr<DecodeRoleStrategy> BuildStaticEvictionDecode(const DecodeRoleContext& context);

}  // namespace millipede
