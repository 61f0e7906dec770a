// How one sequence is spread over N context-parallel ranks.
//
// Prompt: cut into 2N chunks as equal as possible (the first S mod 2N chunks one token longer);
// rank r holds chunks r and 2N-1-r ("zig-zag"). Under a causal mask the work of a query grows
// with its position, so pairing an early chunk with a late one gives every rank the same
// attention work (within one token's row), and every rank holds the same number of tokens
// (within two).
//
// Decode: the token at global position p (after the prompt) is stored on rank p mod N
// (DecodeOwner). Every rank runs the token through the layers (weights are replicated), but only
// its owner appends its K/V, so the shards grow evenly as the sequence does.
//
// Positions are global everywhere: a chunk is a contiguous run [begin, end) of positions.
//
// Pure arithmetic, shared by the coordinator (admission's KV reservation) and the workers (what
// each rank prefills, stores and samples): the one place the zig-zag rule is written.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"

namespace millipede {

struct TokenRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool empty() const { return end <= begin; }
  bool operator==(const TokenRange&) const = default;
};

// Appends `r` to `ranges` (kept in increasing order), merging it with the last range when they
// touch.
inline void AppendRange(std::vector<TokenRange>* ranges, const TokenRange& r) {
  if (!ranges->empty() && ranges->back().end == r.begin) {
    ranges->back().end = r.end;
  } else {
    ranges->push_back(r);
  }
}

// Positions in `ranges` altogether.
inline int64_t TotalSize(std::span<const TokenRange> ranges) {
  int64_t n = 0;
  for (const TokenRange& r : ranges) n += r.size();
  return n;
}

// The positions of rows [offset, offset + count) of `ranges` (row i: the i-th position of
// `ranges` in order), as ranges.
inline std::vector<TokenRange> SliceRangeRows(std::span<const TokenRange> ranges, int64_t offset,
                                              int64_t count) {
  std::vector<TokenRange> out;
  for (const TokenRange& r : ranges) {
    if (count <= 0) break;
    if (offset >= r.size()) {
      offset -= r.size();
      continue;
    }
    const int64_t take = std::min(count, r.size() - offset);
    out.push_back({r.begin + offset, r.begin + offset + take});
    count -= take;
    offset = 0;
  }
  return out;
}

// Every position of `ranges`, in order.
inline std::vector<int64_t> RangePositions(std::span<const TokenRange> ranges) {
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(TotalSize(ranges)));
  for (const TokenRange& r : ranges)
    for (int64_t p = r.begin; p < r.end; ++p) out.push_back(p);
  return out;
}

class ShardPlan {
 public:
  // A plan for a prompt of `prompt_tokens` (>= 1) tokens over `num_ranks` (>= 1) ranks.
  static StatusOr<ShardPlan> Create(int64_t prompt_tokens, int num_ranks);

  int num_ranks() const { return num_ranks_; }
  int64_t prompt_tokens() const { return prompt_tokens_; }
  // The 2N chunks in position order; some are empty when S < 2N.
  const std::vector<TokenRange>& chunks() const { return chunks_; }
  // The prompt ranges rank r holds, in position order: chunk r, then chunk 2N-1-r.
  std::vector<TokenRange> RankPromptRanges(int rank) const;
  // Prompt tokens rank r holds.
  int64_t RankPromptTokens(int rank) const;
  // The rank holding prompt position p (0 <= p < S).
  int RankOfPromptPosition(int64_t position) const;
  // The rank that stores the K/V of the decode token at global position `position`.
  static int DecodeOwner(int64_t position, int num_ranks) {
    return static_cast<int>(position % num_ranks);
  }
  // The rank holding the last token of a run of `tokens` (>= 1) tokens sharded over `num_ranks`
  // (>= 1) ranks: the rank that samples when a prefill chunk of that size ends its prompt.
  static int LastTokenRank(int64_t tokens, int num_ranks);

 private:
  int num_ranks_ = 1;
  int64_t prompt_tokens_ = 0;
  std::vector<TokenRange> chunks_;
};

// Decode K/V rows one rank stores for a job that generates up to `max_new_tokens` tokens: the
// last generated token never needs its K/V and decode positions go round-robin over the ranks
// (DecodeOwner), so ceil((max_new_tokens - 1) / num_ranks); 0 for max_new_tokens <= 1.
int64_t DecodeRowsPerRank(int64_t max_new_tokens, int num_ranks);

// Prompt rows any one rank holds, at most, for a prompt of `prompt_tokens` tokens, without a
// plan: 2 * ceil(prompt_tokens / (2 * num_ranks)) >= ShardPlan::RankPromptTokens(r) for every r.
int64_t PromptRowsBoundPerRank(int64_t prompt_tokens, int num_ranks);

// KV positions any one rank may hold for a job (prompt rows bound + decode rows): what admission
// reserves per rank. num_ranks < 1 counts as 1.
int64_t KvPositionsPerRank(int64_t prompt_tokens, int64_t max_new_tokens, int num_ranks);

}  // namespace millipede
