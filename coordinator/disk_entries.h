// The prefix cache's disk tier after a restart: the entries the workers found on their disks
// (their hellos' disk_entries) indexed again. Pure code.
#pragma once

#include <cstdint>
#include <vector>

#include "control/messages.h"
#include "coordinator/prefix_cache.h"

namespace millipede {

struct DiskReindex {
  int64_t adopted = 0;
  std::vector<uint64_t> drop;  // entries some rank lacks or disagrees on: the workers drop them
  uint64_t max_id = 0;         // the largest entry id any rank reported (of any model)
};

// `reports[r]`: worker r's entries (r = 0 for world rank 1, ...). An entry every worker reports,
// under `cache`'s model key, with the same key, tokens and reuse lengths everywhere, is adopted
// in `cache`'s disk tier with each rank's positions. One under another model key is left alone
// (never used). Any other is returned to drop.
DiskReindex ReindexDiskEntries(const std::vector<std::vector<control::CacheEntryFacts>>& reports,
                               PrefixCache* cache);

}  // namespace millipede
