// Builds, from a sequence's attention policy, each layer's strategies and what its KV store must
// keep: the only place that maps policy names to code.
#pragma once

#include <memory>
#include <vector>

#include "common/checkpoint/model_config.h"
#include "common/policy/attention_policy.h"
#include "worker/attention/attention_strategy.h"
#include "worker/attention/token_selection.h"

namespace millipede {

struct LayerAttention {
  std::unique_ptr<PrefillStrategy> prefill;
  std::unique_ptr<DecodeStrategy> decode;
  // What the layer's KV store keeps: every row, or the sinks and a recent window (streaming heads).
  KvRetention retention;
  // Filter and selected layers: their group's token selection (shared with the group's other
  // layers); null for other roles.
  std::shared_ptr<TokenSelection> selection;
};

// What the store of layer `layer` must keep under `policy`: the sinks and window of streaming
// heads, else every row. (The memory plan asks this without building any strategy.)
KvRetention LayerKvRetention(const AttentionPolicy& policy, int64_t layer);

// One LayerAttention per layer of a sequence shared by `ranks` ranks. The policy must fit the
// model (ParseAttentionPolicy checked it) and be runnable on this engine (checked before the
// sequence starts).
StatusOr<std::vector<LayerAttention>> BuildLayerAttention(const AttentionPolicy& policy,
                                                          const ModelConfig& config,
                                                          int64_t ranks = 1);

}  // namespace millipede
