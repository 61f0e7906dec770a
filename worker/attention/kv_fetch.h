// Rows of one layer's K/V that other ranks hold, fetched on demand for sparse prefill: each rank
// names the positions it needs, and the ranks holding them send just those rows, point to point,
// instead of every block travelling around the ring. The requests are exchanged first (two host
// all-gathers of position ranges), so every rank knows what it sends and receives; then each
// pair of ranks exchanges rows in N - 1 rounds (round t: send to rank + t, receive from
// rank - t), every rank in the same order.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "worker/attention/attention_strategy.h"

namespace millipede {

class KvFetch {
 public:
  // Every rank of the sequence calls this at once. `needed`: positions this rank's queries need
  // (increasing, disjoint; its own positions are left out here). `rank_ranges`: every rank's
  // positions at the rows of its block, by rank; `mine`: this rank's block (its rows).
  // `keys_only`: K alone travels (rows().v is then empty).
  Status Run(AttentionEnv& env, std::span<const TokenRange> needed,
             std::span<const std::vector<TokenRange>> rank_ranges, ConstKvRows mine,
             bool keys_only = false);
  // The fetched rows [fetched, kv_heads, head_dim] and their layout: runs (pos_begin, pos_end,
  // row_begin), sorted by position (sparse_index.h's key layout), flattened.
  ConstKvRows rows() const { return rows_; }
  const std::vector<int64_t>& runs() const { return runs_; }
  int64_t fetched_rows() const { return fetched_; }
  // Device bytes held now.
  int64_t NumBytes() const;

 private:
  BackendTensor k_, v_, send_k_, send_v_, index_;
  ConstKvRows rows_;
  std::vector<int64_t> runs_;
  int64_t fetched_ = 0;
};

// The part of `a` (increasing, disjoint) that is also in `b` (increasing, disjoint).
std::vector<TokenRange> IntersectRanges(std::span<const TokenRange> a,
                                        std::span<const TokenRange> b);
// The part of `a` that is not in `b` (both increasing, disjoint).
std::vector<TokenRange> SubtractRanges(std::span<const TokenRange> a,
                                       std::span<const TokenRange> b);
// Sorts and merges overlapping or touching ranges.
std::vector<TokenRange> NormalizeRanges(std::vector<TokenRange> ranges);

}  // namespace millipede
