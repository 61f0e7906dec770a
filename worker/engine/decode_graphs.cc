#include "worker/engine/decode_graphs.h"

#include <algorithm>

namespace millipede {

int64_t DecodeGraphBucket(int64_t rows, int64_t capacity) {
  int64_t step = kMinBucketRows;
  while (step * 2 <= rows / 8) step *= 2;
  return std::min(capacity, (rows + step - 1) / step * step);
}

DecodeGraphCache::Action DecodeGraphCache::Next(const DecodeGraphKey& key) {
  if (recordings_.count(key) > 0) return Action::kReplay;
  // Keys seen once and never again (a RoPE table per length, buckets left behind) are forgotten
  // in bulk, so that a long-running engine's bookkeeping stays small.
  if (seen_.size() >= kMaxSeen) seen_.clear();
  auto [it, first_time] = seen_.try_emplace(key, false);
  if (first_time || it->second) return Action::kRun;
  return Action::kRecord;
}

const RecordedOps* DecodeGraphCache::Find(const DecodeGraphKey& key) {
  auto it = recordings_.find(key);
  if (it == recordings_.end()) return nullptr;
  uses_.splice(uses_.begin(), uses_, it->second.use);
  return it->second.ops.get();
}

void DecodeGraphCache::Store(const DecodeGraphKey& key, std::unique_ptr<RecordedOps> ops) {
  auto it = recordings_.find(key);
  if (it != recordings_.end()) {
    it->second.ops = std::move(ops);
    uses_.splice(uses_.begin(), uses_, it->second.use);
    return;
  }
  uses_.push_front(key);
  recordings_.emplace(key, Recording{std::move(ops), uses_.begin()});
  seen_.erase(key);
  while (recordings_.size() > limit_) {
    recordings_.erase(uses_.back());
    uses_.pop_back();
  }
}

void DecodeGraphCache::Refuse(const DecodeGraphKey& key) {
  seen_[key] = true;
  auto it = recordings_.find(key);
  if (it == recordings_.end()) return;
  uses_.erase(it->second.use);
  recordings_.erase(it);
}

void DecodeGraphCache::Clear() {
  recordings_.clear();
  uses_.clear();
  seen_.clear();
}

}  // namespace millipede
