// Scenarios for GlobalTopK tests: candidates of every rank drawn from one seed (so every process
// of an mpirun draws the same), and the oracle, a full sort of all of them per group.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "worker/dist/global_top_k.h"

namespace millipede::testing {

enum class Scores { kUniform, kTies, kWithInfinities };

struct TopKScenario {
  int ranks = 1;
  int64_t num_groups = 1;
  int64_t positions = 0;  // per group, spread over the ranks
  int64_t k = 0;
  Scores scores = Scores::kUniform;
  int empty_rank = -1;       // a rank that gets no candidate at all (-1: none)
  int64_t empty_group = -1;  // a group with no candidate on any rank (-1: none)
  uint64_t seed = 1;
};

// Every rank's candidates of every group: [rank][group] -> candidates.
inline std::vector<std::vector<std::vector<GlobalTopKCandidate>>> DrawCandidates(
    const TopKScenario& s) {
  std::vector<std::vector<std::vector<GlobalTopKCandidate>>> out(
      static_cast<size_t>(s.ranks),
      std::vector<std::vector<GlobalTopKCandidate>>(static_cast<size_t>(s.num_groups)));
  std::mt19937_64 rng(s.seed);
  std::uniform_real_distribution<float> uniform(-5.0f, 5.0f);
  for (int64_t g = 0; g < s.num_groups; ++g) {
    if (g == s.empty_group) continue;
    for (int64_t p = 0; p < s.positions; ++p) {
      int rank = static_cast<int>(rng() % static_cast<uint64_t>(s.ranks));
      if (rank == s.empty_rank) rank = (rank + 1) % s.ranks;
      float score = uniform(rng);
      if (s.scores == Scores::kTies) score = static_cast<float>(rng() % 3);
      if (s.scores == Scores::kWithInfinities && rng() % 4 == 0)
        score = (rng() % 3 == 0 ? 1.0f : -1.0f) * std::numeric_limits<float>::infinity();
      // Positions interleave across groups and skip values, as a sharded sequence's would.
      out[static_cast<size_t>(rank)][static_cast<size_t>(g)].push_back({score, 3 * p + g % 2});
    }
  }
  // Each rank lists its candidates in an order unrelated to the ranking.
  for (auto& rank : out)
    for (auto& group : rank) std::shuffle(group.begin(), group.end(), rng);
  return out;
}

// The kept positions of each group, from a sort of every rank's candidates.
inline std::vector<std::vector<GlobalTopKCandidate>> OracleKept(
    const std::vector<std::vector<std::vector<GlobalTopKCandidate>>>& all, int64_t num_groups,
    int64_t k) {
  std::vector<std::vector<GlobalTopKCandidate>> kept(static_cast<size_t>(num_groups));
  for (int64_t g = 0; g < num_groups; ++g) {
    std::vector<GlobalTopKCandidate> pool;
    for (const auto& rank : all)
      pool.insert(pool.end(), rank[static_cast<size_t>(g)].begin(),
                  rank[static_cast<size_t>(g)].end());
    std::sort(pool.begin(), pool.end(), [](const auto& a, const auto& b) {
      return a.score != b.score ? a.score > b.score : a.position < b.position;
    });
    pool.resize(std::min<size_t>(pool.size(), static_cast<size_t>(k)));
    kept[static_cast<size_t>(g)] = pool;
  }
  return kept;
}

// Runs GlobalTopK with `rank`'s candidates and checks the cuts and the keep flags against the
// oracle.
inline void ExpectMatchesOracle(Communicator& comm, const TopKScenario& s) {
  const auto all = DrawCandidates(s);
  const auto& mine = all[static_cast<size_t>(comm.rank())];
  std::vector<GlobalTopKCandidate> flat;
  std::vector<int64_t> offsets{0};
  for (const auto& group : mine) {
    flat.insert(flat.end(), group.begin(), group.end());
    offsets.push_back(static_cast<int64_t>(flat.size()));
  }
  auto result = GlobalTopK(comm, flat, offsets, s.k);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  const auto kept = OracleKept(all, s.num_groups, s.k);
  ASSERT_EQ(result->cuts.size(), static_cast<size_t>(s.num_groups));
  ASSERT_EQ(result->keep.size(), flat.size());
  for (int64_t g = 0; g < s.num_groups; ++g) {
    const auto& want = kept[static_cast<size_t>(g)];
    const GlobalTopKCut& cut = result->cuts[static_cast<size_t>(g)];
    EXPECT_EQ(cut.kept, static_cast<int64_t>(want.size())) << "group " << g;
    if (!want.empty()) {
      EXPECT_EQ(cut.last.position, want.back().position) << "group " << g;
      EXPECT_EQ(cut.last.score, want.back().score) << "group " << g;
    }
    // Every rank learns every rank's kept positions.
    std::vector<int64_t> want_positions;
    for (const auto& w : want) want_positions.push_back(w.position);
    std::sort(want_positions.begin(), want_positions.end());
    EXPECT_EQ(result->kept_positions[static_cast<size_t>(g)], want_positions) << "group " << g;
    for (int64_t i = offsets[g]; i < offsets[g + 1]; ++i) {
      const GlobalTopKCandidate& c = flat[static_cast<size_t>(i)];
      const bool in = std::any_of(want.begin(), want.end(),
                                  [&](const auto& w) { return w.position == c.position; });
      EXPECT_EQ(result->keep[static_cast<size_t>(i)], in ? 1 : 0)
          << "group " << g << " position " << c.position << " score " << c.score;
    }
  }
}

}  // namespace millipede::testing
