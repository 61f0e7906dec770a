#include "coordinator/disk_entries.h"

#include <algorithm>
#include <map>
#include <optional>

namespace millipede {
namespace {

bool SameEntry(const control::CacheEntryFacts& a, const control::CacheEntryFacts& b) {
  return a.key == b.key && a.model_key == b.model_key && a.tokens == b.tokens &&
         a.every_length == b.every_length && a.lengths == b.lengths && a.length == b.length;
}

// A report's positions as ranges; none when they are not increasing, disjoint pairs.
std::optional<std::vector<TokenRange>> Ranges(const control::CacheEntryFacts& e) {
  if (e.stored.size() % 2 != 0) return std::nullopt;
  std::vector<TokenRange> out;
  int64_t last = 0;
  for (size_t i = 0; i < e.stored.size(); i += 2) {
    const TokenRange r{e.stored[i], e.stored[i + 1]};
    if (r.begin < last || r.end <= r.begin || r.end > e.length) return std::nullopt;
    out.push_back(r);
    last = r.end;
  }
  return out;
}

}  // namespace

DiskReindex ReindexDiskEntries(const std::vector<std::vector<control::CacheEntryFacts>>& reports,
                               PrefixCache* cache) {
  DiskReindex out;
  const int ranks = static_cast<int>(reports.size());
  // Every report of each entry id, by rank.
  std::map<uint64_t, std::vector<const control::CacheEntryFacts*>> by_id;
  for (int r = 0; r < ranks; ++r)
    for (const control::CacheEntryFacts& e : reports[static_cast<size_t>(r)]) {
      out.max_id = std::max(out.max_id, e.entry);
      auto& slot = by_id[e.entry];
      slot.resize(static_cast<size_t>(ranks), nullptr);
      slot[static_cast<size_t>(r)] = &e;
    }
  for (const auto& [id, seen] : by_id) {
    const control::CacheEntryFacts* first = seen.front();
    if (first != nullptr && first->model_key != cache->model_key()) continue;
    bool whole = first != nullptr;
    RankPositions positions(ranks);
    for (int r = 0; whole && r < ranks; ++r) {
      const control::CacheEntryFacts* e = seen[static_cast<size_t>(r)];
      std::optional<std::vector<TokenRange>> ranges;
      if (e != nullptr && SameEntry(*e, *first)) ranges = Ranges(*e);
      whole = ranges.has_value();
      if (whole) positions.SetRank(r, std::move(*ranges));
    }
    if (whole && positions.total() == first->length &&
        cache->AdoptDiskEntry(id, first->key, first->tokens, first->every_length, first->lengths,
                              std::move(positions))
            .ok()) {
      ++out.adopted;
      continue;
    }
    out.drop.push_back(id);
  }
  return out;
}

}  // namespace millipede
