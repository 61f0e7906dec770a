// The static-eviction baseline (H2O-style): at the end of prefill the last `observed_queries`
// prompt queries score every key by the softmax probability they give it — normalised over every
// rank's keys — and each KV head keeps its global top `keep_tokens` keys, agreed between the
// ranks; decode sees those plus the `recent_tokens` latest positions. Exact under context
// parallelism: the same keys are kept whatever the number of ranks.
//
// The selection is the sequence's state: one strategy object per layer of one sequence.
#pragma once

#include <cstdint>
#include <vector>

#include "common/policy/attention_policy.h"
#include "worker/attention/attention_strategy.h"

namespace millipede {

class StaticEvictionDecode final : public DecodeStrategy {
 public:
  explicit StaticEvictionDecode(const StaticEvictionParams& params) : params_(params) {}
  const char* name() const override { return "static-eviction"; }
  Status Partial(AttentionEnv& env, const DecodeInput& in, TensorView o,
                 TensorView lse) override;
  Status AfterPrefill(AttentionEnv& env, const PrefillInput& in) override;

 private:
  StaticEvictionParams params_;
  // [rows, num_kv_heads]: 1 where a held row is a kept heavy hitter of that KV head.
  std::vector<uint8_t> heavy_;
};

}  // namespace millipede
