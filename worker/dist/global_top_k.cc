#include "worker/dist/global_top_k.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

namespace millipede {
namespace {

// What every rank tells the others first: fixed size, so it can be gathered before anything is
// known about the others.
struct Header {
  int64_t valid;  // 1 when this rank's input passed its checks
  int64_t num_groups;
  int64_t k;
  int64_t sent;  // candidates this rank sends in the second gather
};

// A candidate as sent (explicit padding, so no uninitialised byte goes over the wire).
struct WireCandidate {
  int64_t position;
  float score;
  uint32_t zero;
};
static_assert(sizeof(WireCandidate) == 16);

Status CheckInput(std::span<const GlobalTopKCandidate> candidates,
                  std::span<const int64_t> group_offsets, int64_t k) {
  MP_REQUIRE(!group_offsets.empty(), "global top-k: group_offsets needs num_groups + 1 entries");
  MP_REQUIRE(k >= 0, "global top-k: k = ", k, " is negative");
  MP_REQUIRE(
      group_offsets.front() == 0 && group_offsets.back() == static_cast<int64_t>(candidates.size()),
      "global top-k: group_offsets must run from 0 to ", candidates.size());
  for (size_t g = 1; g < group_offsets.size(); ++g)
    MP_REQUIRE(group_offsets[g] >= group_offsets[g - 1], "global top-k: group_offsets[", g,
               "] = ", group_offsets[g], " < group_offsets[", g - 1, "]");
  for (size_t i = 0; i < candidates.size(); ++i)
    MP_REQUIRE(!std::isnan(candidates[i].score), "global top-k: candidate ", i, " (position ",
               candidates[i].position, ") has a NaN score");
  return OkStatus();
}

// This rank's best min(k, n) candidates of each group, best first, and how many per group.
std::vector<WireCandidate> LocalBest(std::span<const GlobalTopKCandidate> candidates,
                                     std::span<const int64_t> group_offsets, int64_t k,
                                     std::vector<int64_t>* counts) {
  std::vector<WireCandidate> out;
  std::vector<GlobalTopKCandidate> group;
  const size_t num_groups = group_offsets.size() - 1;
  counts->assign(num_groups, 0);
  for (size_t g = 0; g < num_groups; ++g) {
    group.assign(candidates.begin() + group_offsets[g], candidates.begin() + group_offsets[g + 1]);
    const int64_t n = std::min<int64_t>(k, static_cast<int64_t>(group.size()));
    std::partial_sort(group.begin(), group.begin() + n, group.end(),
                      [](const auto& a, const auto& b) { return a.Beats(b); });
    for (int64_t i = 0; i < n; ++i) out.push_back({group[i].position, group[i].score, 0});
    (*counts)[g] = n;
  }
  return out;
}

// The cut of one group from every rank's candidates of it.
StatusOr<GlobalTopKCut> CutGroup(std::vector<GlobalTopKCandidate>& pool, int64_t k, int64_t group) {
  std::sort(pool.begin(), pool.end(),
            [](const auto& a, const auto& b) { return a.position < b.position; });
  for (size_t i = 1; i < pool.size(); ++i)
    MP_REQUIRE(pool[i].position != pool[i - 1].position, "global top-k: position ",
               pool[i].position, " appears twice in group ", group);
  GlobalTopKCut cut;
  cut.kept = std::min<int64_t>(k, static_cast<int64_t>(pool.size()));
  if (cut.kept == 0) return cut;
  std::nth_element(pool.begin(), pool.begin() + (cut.kept - 1), pool.end(),
                   [](const auto& a, const auto& b) { return a.Beats(b); });
  cut.last = pool[static_cast<size_t>(cut.kept - 1)];
  return cut;
}

// Every rank's candidates of each group, from the second gather's blocks (one of `bytes` per
// rank: counts per group, then the candidates).
StatusOr<std::vector<std::vector<GlobalTopKCandidate>>> Unpack(
    const std::vector<unsigned char>& recv, size_t bytes, const std::vector<Header>& headers,
    int64_t num_groups) {
  std::vector<std::vector<GlobalTopKCandidate>> pools(static_cast<size_t>(num_groups));
  for (size_t r = 0; r < headers.size(); ++r) {
    const unsigned char* block = recv.data() + r * bytes;
    const unsigned char* wire = block + num_groups * sizeof(int64_t);
    int64_t next = 0;
    for (int64_t g = 0; g < num_groups; ++g) {
      int64_t count = 0;
      std::memcpy(&count, block + g * sizeof(int64_t), sizeof count);
      MP_ASSERT(count >= 0 && next + count <= headers[r].sent, "rank ", r,
                " sent counts that do not add up");
      for (int64_t i = 0; i < count; ++i, ++next) {
        WireCandidate c;
        std::memcpy(&c, wire + next * sizeof(WireCandidate), sizeof c);
        pools[static_cast<size_t>(g)].push_back({c.score, c.position});
      }
    }
  }
  return pools;
}

}  // namespace

StatusOr<GlobalTopKResult> GlobalTopK(Communicator& comm,
                                      std::span<const GlobalTopKCandidate> candidates,
                                      std::span<const int64_t> group_offsets, int64_t k) {
  const int ranks = comm.size();
  const Status input = CheckInput(candidates, group_offsets, k);
  std::vector<int64_t> counts;
  std::vector<WireCandidate> mine;
  if (input.ok()) mine = LocalBest(candidates, group_offsets, k, &counts);

  // 1. Headers: everyone's validity, group count, k and how much each sends.
  const Header header{input.ok() ? 1 : 0,
                      static_cast<int64_t>(group_offsets.empty() ? 0 : group_offsets.size() - 1), k,
                      static_cast<int64_t>(mine.size())};
  std::vector<Header> headers(static_cast<size_t>(ranks));
  MP_RETURN_IF_ERROR(comm.HostAllGather(&header, headers.data(), sizeof(Header)));
  if (!input.ok()) return input;
  int64_t max_sent = 0;
  for (int r = 0; r < ranks; ++r) {
    const Header& h = headers[static_cast<size_t>(r)];
    MP_REQUIRE(h.valid == 1, "global top-k: rank ", r, " passed invalid candidates");
    MP_REQUIRE(h.num_groups == header.num_groups && h.k == k, "global top-k: rank ", r,
               " asks for k = ", h.k, " over ", h.num_groups, " groups, this rank for k = ", k,
               " over ", header.num_groups);
    max_sent = std::max(max_sent, h.sent);
  }

  // 2. Counts per group, then the candidates, padded to the largest sender.
  const int64_t num_groups = header.num_groups;
  const size_t bytes = static_cast<size_t>(num_groups) * sizeof(int64_t) +
                       static_cast<size_t>(max_sent) * sizeof(WireCandidate);
  std::vector<unsigned char> send(bytes, 0), recv(bytes * static_cast<size_t>(ranks));
  std::memcpy(send.data(), counts.data(), counts.size() * sizeof(int64_t));
  std::memcpy(send.data() + counts.size() * sizeof(int64_t), mine.data(),
              mine.size() * sizeof(WireCandidate));
  MP_RETURN_IF_ERROR(comm.HostAllGather(send.data(), recv.data(), bytes));

  // 3. Every rank cuts every group from the same candidates.
  MP_ASSIGN_OR_RETURN(std::vector<std::vector<GlobalTopKCandidate>> pools,
                      Unpack(recv, bytes, headers, num_groups));
  GlobalTopKResult result;
  for (int64_t g = 0; g < num_groups; ++g) {
    std::vector<GlobalTopKCandidate>& pool = pools[static_cast<size_t>(g)];
    MP_ASSIGN_OR_RETURN(GlobalTopKCut cut, CutGroup(pool, k, g));
    result.cuts.push_back(cut);
    std::vector<int64_t>& kept = result.kept_positions.emplace_back();
    for (const GlobalTopKCandidate& c : pool)
      if (cut.Keeps(c)) kept.push_back(c.position);
    std::sort(kept.begin(), kept.end());
  }
  result.keep.assign(candidates.size(), 0);
  for (int64_t g = 0; g < num_groups; ++g)
    for (int64_t i = group_offsets[g]; i < group_offsets[g + 1]; ++i)
      result.keep[static_cast<size_t>(i)] =
          result.cuts[static_cast<size_t>(g)].Keeps(candidates[static_cast<size_t>(i)]) ? 1 : 0;
  return result;
}

}  // namespace millipede
