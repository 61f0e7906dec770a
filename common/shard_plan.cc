#include "common/shard_plan.h"

#include <algorithm>

namespace millipede {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

StatusOr<ShardPlan> ShardPlan::Create(int64_t prompt_tokens, int num_ranks) {
  MP_REQUIRE(prompt_tokens >= 1, "shard plan: the prompt must have at least one token, got ",
             prompt_tokens);
  MP_REQUIRE(num_ranks >= 1, "shard plan: need at least one rank, got ", num_ranks);
  ShardPlan plan;
  plan.num_ranks_ = num_ranks;
  plan.prompt_tokens_ = prompt_tokens;
  const int64_t num_chunks = 2 * static_cast<int64_t>(num_ranks);
  const int64_t base = prompt_tokens / num_chunks;
  const int64_t extra = prompt_tokens % num_chunks;
  int64_t begin = 0;
  for (int64_t c = 0; c < num_chunks; ++c) {
    const int64_t size = base + (c < extra ? 1 : 0);
    plan.chunks_.push_back({begin, begin + size});
    begin += size;
  }
  return plan;
}

std::vector<TokenRange> ShardPlan::RankPromptRanges(int rank) const {
  const int last = 2 * num_ranks_ - 1;
  return {chunks_[static_cast<size_t>(rank)], chunks_[static_cast<size_t>(last - rank)]};
}

int64_t ShardPlan::RankPromptTokens(int rank) const {
  int64_t n = 0;
  for (const TokenRange& r : RankPromptRanges(rank)) n += r.size();
  return n;
}

int ShardPlan::RankOfPromptPosition(int64_t position) const {
  for (size_t c = 0; c < chunks_.size(); ++c) {
    if (position >= chunks_[c].begin && position < chunks_[c].end) {
      const int chunk = static_cast<int>(c);
      return chunk < num_ranks_ ? chunk : 2 * num_ranks_ - 1 - chunk;
    }
  }
  return -1;
}

int ShardPlan::LastTokenRank(int64_t tokens, int num_ranks) {
  // The last token sits in the last non-empty chunk: chunk 2N-1 (rank 0) once every chunk has a
  // token, else chunk tokens-1 (the first `tokens` chunks hold one token each).
  const int64_t chunk = std::min<int64_t>(tokens, 2 * static_cast<int64_t>(num_ranks)) - 1;
  return static_cast<int>(chunk < num_ranks ? chunk : 2 * num_ranks - 1 - chunk);
}

int64_t DecodeRowsPerRank(int64_t max_new_tokens, int num_ranks) {
  return CeilDiv(std::max<int64_t>(max_new_tokens - 1, 0), std::max(1, num_ranks));
}

int64_t PromptRowsBoundPerRank(int64_t prompt_tokens, int num_ranks) {
  return 2 * CeilDiv(std::max<int64_t>(prompt_tokens, 0), 2 * std::max(1, num_ranks));
}

int64_t KvPositionsPerRank(int64_t prompt_tokens, int64_t max_new_tokens, int num_ranks) {
  return PromptRowsBoundPerRank(prompt_tokens, num_ranks) +
         DecodeRowsPerRank(max_new_tokens, num_ranks);
}

}  // namespace millipede
