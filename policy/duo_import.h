// DuoAttention's retrieval / streaming head split as attention policies.
//
// DuoAttention trains one gate per layer and KV head and ships them as full_attention_heads.tsv
// (attn_patterns/<model>/<run>/ in its repository, written by numpy.savetxt): one line per layer,
// one tab-separated number per KV head, e.g. "8.59e-01\t6.52e-01\t-9.25e-05\t...". Training clamps
// the gates to [0, 1] before every step, so a saved gate overshoots by at most one optimiser step
// (the shipped files hold values down to about -1.4e-3); DuoAttention's loader clips them to
// [0, 1] and so does this one. A value further than 0.05 outside [0, 1] is not a gate and is
// refused. Beside the TSV, DuoAttention's config.json records the sink_size and recent_size the
// streaming heads keep.
//
// A KV head is a retrieval head when its (clipped) gate is >= the threshold, else a streaming
// head. With a sparsity Q instead, the streaming heads are the ceil(Q * (N - 1)) heads of lowest
// gate over the whole model (N KV heads in all; Q >= 1: every head): exactly the heads below
// numpy.quantile(gates, Q), which is DuoAttention's threshold for a sparsity, except that heads
// of equal gate are ranked by layer, then head (the earlier ones stream first) instead of by
// DuoAttention's random tie-breaking noise.
//
// Retrieval heads: prefill dense, decode full. Streaming heads: prefill a-shape {sink, recent}
// (each query sees the sinks and the `recent` most recent keys, the Λ mask DuoAttention trains
// the gates with) and decode streaming-head with the same sink and recent window.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/model_config.h"
#include "common/status.h"
#include "policy/policy_import.h"

namespace millipede {

// Gates as read from full_attention_heads.tsv, clipped to [0, 1].
struct DuoGates {
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;
  std::vector<double> values;  // [num_layers, num_kv_heads] row-major

  double at(int64_t layer, int64_t head) const {
    return values[static_cast<size_t>(layer * num_kv_heads + head)];
  }
};

// Parses the TSV. Blank lines and lines starting with '#' are skipped (numpy.loadtxt skips them
// too). Every other line must have the first data line's number of tab-separated fields, each a
// finite number within 0.05 of [0, 1]; errors name `what`, the line and the column (1-based).
StatusOr<DuoGates> ParseDuoGates(std::string_view text, const std::string& what);

// The streaming heads' sinks and recent window from DuoAttention's config.json (the file beside
// the TSV): "sink_size" and "recent_size", both positive integers.
struct DuoStreamingSizes {
  int64_t sink = 0;
  int64_t recent = 0;
};
StatusOr<DuoStreamingSizes> ParseDuoPatternConfig(std::string_view json_text,
                                                  const std::string& what);

struct DuoImportOptions {
  // Exactly one of threshold and sparsity.
  std::optional<double> threshold;  // finite
  std::optional<double> sparsity;   // in [0, 1]: the share of streaming heads
  DuoStreamingSizes sizes;          // both positive
  int64_t dense_below_tokens = 0;
};

// Builds the policy for `model`: the gates must have num_hidden_layers rows and
// num_key_value_heads columns (errors name `what`, the counts and, when the columns match the
// query heads instead, say so).
StatusOr<PolicyImport> ImportDuoGates(const DuoGates& gates, const ModelConfig& model,
                                      const DuoImportOptions& options, const std::string& what);

}  // namespace millipede
