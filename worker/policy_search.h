// MInference's pattern search (its Algorithm 1), as millipede-policy search runs it: for every
// layer and KV head, each candidate pattern tuned to the same cost is run on a reference prompt,
// and the head keeps the candidate whose attention output is closest to dense attention's.
//
// Cost is the query-key pairs the pattern's kernel computes. The candidates start from the model
// of policy/policy_summary.h (ExpectedPrefillPairs, what `millipede-policy show`
// reports): the largest parameter whose pairs stay within `budget` of the causal pairs at the
// prompt's length. That model is exact for a-shape but only bounds the others, whose kernels run
// whole bands and blocks of the index they build: so each vertical-slash, block-sparse and
// antidiagonal candidate is then run on the reference prompt (every layer and head) and its
// sizes (the antidiagonal's mass threshold) tuned until the pairs its index covers — the sparse
// kernel's work — are within 10% of the budget (SearchCandidate::measured_density). The
// candidates: a-shape (sink_tokens sinks and the window that fits), block-sparse (64-token
// blocks), vertical-slash with an eighth and with half of its keys per query as columns (the rest
// diagonals, 64 last queries) and antidiagonal (64-token blocks, stride 8).
//
// Each candidate is measured on one layer at a time, every other layer dense, so a layer sees
// the inputs dense attention would give it: the prompt runs up to that layer with the candidate
// on all of its KV heads, and each KV head's error is
//   sum over the prompt's rows and the head's query heads of |o - o_dense|^2 / |o_dense|^2
// (o, the layer's attention output before the output projection). Heads are independent within
// a layer, so each head's choice is the best of the candidates for it. Candidates the engine
// cannot run (a pattern its backend lacks) are skipped and named in the result.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "policy/attention_policy.h"
#include "worker/engine/engine.h"

namespace millipede {

struct PolicySearchOptions {
  double budget = 0.1;             // in (0, 1]: the share of the causal pairs a head may compute
  int64_t sink_tokens = 64;        // the a-shape candidates' sinks
  int64_t dense_below_tokens = 0;  // written into the policy
};

struct SearchCandidate {
  std::string name;  // e.g. "a-shape 64+200", "vertical-slash 16/112"
  HeadPrefillPolicy head;
  bool runnable = true;  // false: the engine refused the pattern; never chosen
  // The share of the causal pairs its index covered on the reference prompt after tuning (-1:
  // not measured; a-shape's is exact by the model).
  double measured_density = -1;
};

struct PolicySearchResult {
  AttentionPolicy policy;
  std::vector<SearchCandidate> candidates;
  // [layer][candidate][kv_head] relative squared error (0 for candidates not run).
  std::vector<std::vector<std::vector<double>>> errors;
  // [layer][kv_head]: the index of the chosen candidate.
  std::vector<std::vector<int>> chosen;
};

// The candidates for a prompt of `length` tokens (length >= 1).
StatusOr<std::vector<SearchCandidate>> SearchCandidates(int64_t length,
                                                        const PolicySearchOptions& options);

// Runs the search on one process: `engine_options` make the engine (its attention_observer is
// the search's own), `prompt` is the reference prompt (at least 64 tokens).
StatusOr<PolicySearchResult> SearchPolicy(EngineOptions engine_options,
                                          std::span<const int32_t> prompt,
                                          const PolicySearchOptions& options);

// One line per layer: each KV head's choice and error.
std::string PolicySearchReport(const PolicySearchResult& result);

}  // namespace millipede
