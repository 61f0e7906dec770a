#include "worker/kv/kv_store.h"

#include <algorithm>

namespace millipede {

std::vector<TokenRange> KvRetention::Kept(std::span<const TokenRange> ranges,
                                          int64_t length) const {
  if (KeepsAll() || length < keep_all_below) return {ranges.begin(), ranges.end()};
  std::vector<TokenRange> kept;
  const int64_t window_begin = length - window_tokens + 1;
  for (const TokenRange& r : ranges) {
    const TokenRange sinks{r.begin, std::min(r.end, sink_tokens)};
    const TokenRange recent{std::max(r.begin, std::max(window_begin, sink_tokens)), r.end};
    if (!sinks.empty()) AppendRange(&kept, sinks);
    if (!recent.empty()) AppendRange(&kept, recent);
  }
  return kept;
}

int64_t KvRetention::KeptRows(std::span<const TokenRange> ranges, int64_t length) const {
  return TotalSize(Kept(ranges, length));
}

StatusOr<int64_t> KvStoreBase::CheckStep(std::span<const TokenRange> step_ranges,
                                         int64_t capacity) const {
  int64_t n = 0, last = held_ranges_.empty() ? 0 : held_ranges_.back().end;
  for (const TokenRange& r : step_ranges) {
    MP_REQUIRE(!r.empty(), "KV store: empty commit");
    MP_REQUIRE(r.begin >= last, "KV store: positions must be appended in increasing order");
    last = r.end;
    n += r.size();
  }
  MP_REQUIRE(held_rows_ + n <= capacity, "KV store: ", held_rows_ + n,
             " rows exceed the capacity of ", capacity);
  return n;
}

void KvStoreBase::HoldAll(std::span<const TokenRange> step_ranges, int64_t rows) {
  for (const TokenRange& r : step_ranges) AppendRange(&held_ranges_, r);
  held_rows_ += rows;
}

const char* KvTierName(KvTier tier) { return tier == KvTier::kDevice ? "device" : "host"; }

}  // namespace millipede
