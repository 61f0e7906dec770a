// Query-key pairs of prefill attention, for the achieved density a job reports: the pairs one KV
// head's queries at `queries` (global positions) compute against every key of the sequence,
// dense (causal) or A-shape (sinks + a recent window), in closed form. Sparse heads count theirs
// on the backend from their index (SparseIndexPairs).
#pragma once

#include <cstdint>
#include <span>

#include "common/shard_plan.h"

namespace millipede {

// Sum over the query positions p of (p + 1): the causal mask's pairs.
int64_t CausalPairs(std::span<const TokenRange> queries);

// Sum over the query positions p of the keys k <= p with k < sink or p - k < window (window > 0).
int64_t WindowPairs(std::span<const TokenRange> queries, int64_t sink, int64_t window);

}  // namespace millipede
