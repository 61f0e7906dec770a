// Decode over every row the layer's store holds on this rank (Flash-Decoding's split-KV: each
// rank's partial is merged by log-sum-exp with the others' by the engine). Over a streaming store
// (sinks + recent window only) this is DuoAttention's streaming head: the store decides what is
// seen, the strategy attends to all of it.
#pragma once

#include "policy/attention_policy.h"
#include "worker/attention/attention_strategy.h"
#include "worker/attention/decode/decode_role.h"

namespace millipede {

class FullDecode final : public DecodeStrategy {
 public:
  explicit FullDecode(const char* name = "full") : name_(name) {}
  const char* name() const override { return name_; }
  Status Partial(AttentionEnv& env, const DecodeInput& in, TensorView o,
                 TensorView lse) override;
  bool batchable() const override { return true; }
  bool batches_recorded() const override { return true; }
  // One part: every row.
  Status BatchParts(AttentionEnv& env, const DecodeInput& in,
                    std::vector<DecodePart>* parts) override;

 private:
  const char* name_;
};

// The full role's builder: FullDecode.
StatusOr<DecodeRoleStrategy> BuildFullDecode(const DecodeRoleContext& context);
// The streaming-head role's builder (a layer whose every KV head is a streaming head): its store
// keeps the sinks and the window (StreamingHeadRetention), decode attends to all it keeps.
StatusOr<DecodeRoleStrategy> BuildStreamingHeadDecode(const DecodeRoleContext& context);
// What the store of a streaming-head layer keeps: the policy's streaming_head sinks and window.
KvRetention StreamingHeadLayerRetention(const AttentionPolicy& policy);

}  // namespace millipede
