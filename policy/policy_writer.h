// Writes an attention policy in the file format of attention_policy.h, so that tools which build
// policies (the importers of millipede-policy) hand the engine the same files people write.
#pragma once

#include <string>

#include "common/status.h"
#include "policy/attention_policy.h"

namespace millipede {

// The policy as a policy file: "version" 1, dense_below_tokens, the model-wide decode parameters
// (filter, streaming_head, static_eviction) and one "layers" entry per layer, one per line, naming
// each KV head's pattern, the parameters of the heads that use them and each head's decode role.
// A head's parameter sets that its pattern does not use are not written (they read back as the
// defaults), so ParseAttentionPolicy gives back a policy equal to `policy` whenever those unused
// sets hold the defaults, as they do in every policy the importers build.
std::string AttentionPolicyToJson(const AttentionPolicy& policy);

// Validates `policy` for a model of `num_layers` x `num_kv_heads` (ValidateAttentionPolicy) and
// writes AttentionPolicyToJson to `path`. Nothing is written when the policy is invalid.
Status WriteAttentionPolicy(const std::string& path, const AttentionPolicy& policy,
                            int64_t num_layers, int64_t num_kv_heads);

}  // namespace millipede
