// Every prefill pattern and decode role this build runs, registered in one place
// (attention_registry.cc, one list each). The layers' strategies are built from it
// (layer_attention.h), and Engine::capabilities() reports it to the coordinator, whose admission
// checks a job's policy against what every worker reported (CheckPolicyRunnable). Adding a
// pattern or role: docs/contributing.md.
#pragma once

#include <span>

#include "policy/attention_policy.h"
#include "worker/attention/decode/decode_role.h"
#include "worker/attention/prefill_pattern_variant.h"
#include "worker/kv/kv_store.h"

namespace millipede {

struct DecodeRoleRegistration {
  DecodeRole role;
  DecodeRoleBuilder build;
  // What the store of a layer whose KV heads all have the role keeps; null: every row.
  KvRetention (*retention)(const AttentionPolicy& policy) = nullptr;
};

// The registered prefill patterns, in registration order: a layer's sparse patterns plan, build
// their indices and merge their partials in this order (SparsePrefill).
std::span<const PrefillPatternVariant* const> RegisteredPrefillPatterns();
// The registered decode roles, in registration order.
std::span<const DecodeRoleRegistration> RegisteredDecodeRoles();

// The registered variant of `pattern` (registration of `role`), or null when none is.
const PrefillPatternVariant* FindPrefillPattern(PrefillPattern pattern);
const DecodeRoleRegistration* FindDecodeRole(DecodeRole role);

// What this build runs: every registered pattern and role, in registration order, and layers
// whose KV heads mix full and streaming-head decode (StreamingHeadsDecode, HeadGroupDecode).
PolicyCapabilities RegisteredCapabilities();

}  // namespace millipede
