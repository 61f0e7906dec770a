// One top-k over the candidates of every rank: each rank holds scored candidates (a key's
// position and its score) for each of several groups (KV heads, query heads, ...), and all ranks
// agree on the k best of each group over all of them. Static eviction picks its heavy-hitter keys
// with it; the vertical-slash, block-sparse and OmniKV index builders will pick columns, blocks
// and tokens the same way.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "common/status.h"
#include "worker/dist/communicator.h"

namespace millipede {

struct GlobalTopKCandidate {
  float score = 0.0f;    // any value but NaN
  int64_t position = 0;  // the candidate's global position: unique within its group over ranks

  // The order of the selection: the higher score first, then the lower position. A total order
  // when positions are unique, so every rank ranks every candidate alike.
  bool Beats(const GlobalTopKCandidate& other) const {
    return score != other.score ? score > other.score : position < other.position;
  }
};

// A group's cut: its `kept` best candidates over all ranks are kept, `last` being the worst of
// them. kept = min(k, candidates of the group over all ranks).
struct GlobalTopKCut {
  int64_t kept = 0;
  GlobalTopKCandidate last{-std::numeric_limits<float>::infinity(), -1};

  // True when `c` is among the kept (c does not rank below `last`); never when kept == 0.
  bool Keeps(const GlobalTopKCandidate& c) const { return kept > 0 && !last.Beats(c); }
};

struct GlobalTopKResult {
  std::vector<GlobalTopKCut> cuts;  // [num_groups], identical on every rank
  std::vector<uint8_t> keep;        // [candidates.size()]: 1 where this rank's candidate is kept
  // [num_groups]: the kept positions of every rank, increasing, identical on every rank (what a
  // rank needs when it uses the others' selections, as the sparse prefill index does).
  std::vector<std::vector<int64_t>> kept_positions;
};

// Every rank of `comm` calls this together, with the same number of groups and the same k >= 0
// (checked: a mismatch is an InvalidArgument on every rank). Group g's candidates on this rank
// are candidates[group_offsets[g], group_offsets[g + 1]): group_offsets has num_groups + 1
// entries, starts at 0, never decreases and ends at candidates.size(). A rank may hold no
// candidate for some group or for all; k may exceed what there is (then every candidate is kept).
// Each rank sends at most k candidates per group, its local best, in two host all-gathers (a
// fixed-size header, then counts and candidates); every rank then cuts each group alike.
// Bad input on any rank (a NaN score, k < 0, malformed offsets, a position repeated within a
// group among the exchanged candidates) is an InvalidArgument on every rank, so none is left
// waiting in a collective.
StatusOr<GlobalTopKResult> GlobalTopK(Communicator& comm,
                                      std::span<const GlobalTopKCandidate> candidates,
                                      std::span<const int64_t> group_offsets, int64_t k);

}  // namespace millipede
