// What a decode role is to the worker: a builder of its layer's decode strategy from the policy,
// registered with the role in attention_registry.cc (layer_attention.h calls it for every layer
// whose KV heads share the role).
#pragma once

#include <cstdint>
#include <memory>

#include "policy/attention_policy.h"
#include "worker/attention/attention_strategy.h"

namespace millipede {

class TokenSelection;

// What a builder reads: the sequence's policy and the layer it builds for.
struct DecodeRoleContext {
  const AttentionPolicy& policy;
  int64_t layer = 0;
  // The latest filter layer's token selection, null before the first: a filter layer's builder
  // starts a new one here, a selected layer's reads it.
  std::shared_ptr<TokenSelection>* selection = nullptr;
};

// What a builder makes for one layer.
struct DecodeRoleStrategy {
  std::unique_ptr<DecodeStrategy> decode;
  // Filter and selected layers: their group's token selection; null for other roles.
  std::shared_ptr<TokenSelection> selection;
};

using DecodeRoleBuilder = StatusOr<DecodeRoleStrategy> (*)(const DecodeRoleContext& context);

}  // namespace millipede
