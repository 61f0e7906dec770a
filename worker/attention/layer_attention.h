// Builds, from a sequence's attention policy, each layer's strategies and what its KV store must
// keep, by the variants and builders registered for its patterns and roles
// (attention_registry.h).
#pragma once

#include <memory>
#include <vector>

#include "checkpoint/model_config.h"
#include "policy/attention_policy.h"
#include "worker/attention/attention_strategy.h"
#include "worker/attention/decode/token_selection.h"
#include "worker/kv/head_group_kv_store.h"

namespace millipede {

struct LayerAttention {
  std::unique_ptr<PrefillStrategy> prefill;
  std::unique_ptr<DecodeStrategy> decode;
  // What the layer's KV store keeps: every row, or the sinks and a recent window (streaming heads).
  KvRetention retention;
  // Non-empty: the layer keeps a store per group of KV heads (HeadGroupKvStore), its full heads
  // every row and its streaming heads `streaming`'s.
  KvHeadGroups head_groups;
  KvRetention streaming;
  // Filter and selected layers: their group's token selection (shared with the group's other
  // layers); null for other roles.
  std::shared_ptr<TokenSelection> selection;
};

// What the store of layer `layer` must keep under `policy`: the sinks and window of streaming
// heads, else every row. (The memory plan asks this without building any strategy.)
KvRetention LayerKvRetention(const AttentionPolicy& policy, int64_t layer);

// What the streaming heads of a layer split into groups (policy/head_groups.h,
// LayerHeadGroups) keep: the policy's streaming_head sinks and window, and every row while the
// sequence is shorter than dense_below_tokens (prefill is dense there).
KvRetention StreamingHeadRetention(const AttentionPolicy& policy);

// One LayerAttention per layer of a sequence shared by `ranks` ranks. The policy must fit the
// model (ParseAttentionPolicy checked it) and be runnable on this engine (checked before the
// sequence starts). With `head_groups`, the layers LayerHeadGroups splits keep a store per group
// and attend by group (head_group_attention.h); without, one store.
StatusOr<std::vector<LayerAttention>> BuildLayerAttention(const AttentionPolicy& policy,
                                                          const ModelConfig& config,
                                                          int64_t ranks = 1,
                                                          bool head_groups = false);

}  // namespace millipede
