// What a policy asks for, in numbers and in a table: the expected prefill attention density at a
// prompt length, per KV head, per layer and overall, and a per-layer listing of every KV head's
// pattern, parameters and decode role (millipede-policy show).
//
// Density is the share of the causal triangle's query-key pairs (length * (length + 1) / 2) a
// head computes:
//  - dense: 1;
//  - a-shape: a query at position p sees min(p + 1, sink_tokens + window_tokens) keys (the sinks
//    and the recent window, overlapping near the start): exact;
//  - vertical-slash: at most min(p + 1, vertical + slash) keys per query (columns and diagonals
//    may overlap, and the kernels run whole key ranges per query tile): an upper bound on the
//    selected pairs;
//  - block-sparse: at most min(p + 1, top_blocks * block) keys per query (the kept blocks of its
//    query block): an upper bound.
// Below dense_below_tokens the whole policy runs dense (density 1).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "policy/attention_policy.h"

namespace millipede {

// Query-key pairs of causal attention over `length` tokens.
double CausalPairs(int64_t length);

// Pairs one KV head's prefill pattern computes (or, for the dynamic patterns, at most computes)
// over `length` tokens, as in the header comment. Length 0 gives 0.
double ExpectedPrefillPairs(const HeadPrefillPolicy& head, int64_t length);

struct PolicyDensity {
  std::vector<double> layers;   // [num_layers]: the mean over the layer's KV heads
  double overall = 0;           // the mean over every KV head of the model
  bool dense_fallback = false;  // length < dense_below_tokens: everything dense
};

// Expected density at `length` (> 0).
PolicyDensity ExpectedDensity(const AttentionPolicy& policy, int64_t length);

// The millipede-policy show table: a header with the shape and length, one row per layer (its
// density, a code per KV head for the prefill pattern with its parameters, and one for the
// decode role), the overall density, legends spelling every code out, and Summary().
// `length` > 0.
std::string PolicySummaryTable(const AttentionPolicy& policy, int64_t num_query_heads,
                               int64_t length);

}  // namespace millipede
