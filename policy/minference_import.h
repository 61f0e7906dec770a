// MInference's per-model pattern configs as attention policies.
//
// MInference ships one config per model (minference/configs/*.json in its repository): a JSON
// list with one object per layer, each mapping a query head index (a decimal string key, "0" ..
// "H-1") to [pattern, vertical_size, slash_size, score], e.g.
//   [{"0": ["vertical_and_slash", 1000, 6096, 336], "1": ["stream_llm", 100, 800, 0.91], ...}, ...]
// The score is what its offline search measured; it is checked to be a number and not used.
//
// Patterns and parameters, as MInference's prefill kernels read them:
//  - "vertical_and_slash" -> vertical-slash {last_queries 64, vertical, slash}. MInference's
//    kernel raises the sizes to at least 30 columns and 50 diagonals; the import does the same,
//    so the policy keeps what MInference runs.
//  - "block_sparse" -> block-sparse {block 64, top_blocks 100}: MInference's block-sparse kernel
//    ignores the config's two sizes and keeps the top 100 key blocks of 64 per query block.
//  - "stream_llm" (or "a_shape", the name of MInference's model-wide A-shape mode) -> a-shape
//    {sink_tokens = vertical_size, window_tokens = slash_size}: its streaming kernel takes the
//    two sizes as n_init (initial tokens) and n_local (the local window).
//
// Query heads to KV heads: a policy is per KV head, and query head q belongs to KV head
// q / (H / H_kv) (Hugging Face's repeat_kv order). The KV head's pattern is the first of
// vertical-slash, block-sparse, a-shape that any query head of its group has (the dynamic
// patterns keep more than an A-shape's sinks and window), with each parameter the maximum over
// the group's heads of that pattern, so the KV head keeps at least what each of those query
// heads asked for. The a-shape heads of one layer share one sink count (ValidateAttentionPolicy):
// they all take the layer's largest. Decode is full for every head (MInference is prefill only).
#pragma once

#include <string>
#include <string_view>

#include "checkpoint/model_config.h"
#include "common/status.h"
#include "policy/attention_policy.h"
#include "policy/policy_import.h"

namespace millipede {

struct MInferenceImportOptions {
  int64_t dense_below_tokens = 0;  // the policy's dense fallback (>= 0)
  // Layers below this one stay dense, as MInference's `starting_layer` (0: every layer follows
  // the config).
  int64_t starting_layer = 0;
};

// Builds the policy for `model` from a config's text. A config whose layer count differs from
// num_hidden_layers, or a layer whose query heads are not exactly 0 .. num_attention_heads - 1,
// is refused naming the layer and head, as is an unknown pattern name, a malformed entry or a
// size that is not a non-negative integer. `what` names the source in errors.
StatusOr<PolicyImport> ImportMInferenceConfig(std::string_view json_text, const ModelConfig& model,
                                              const MInferenceImportOptions& options,
                                              const std::string& what);

}  // namespace millipede
