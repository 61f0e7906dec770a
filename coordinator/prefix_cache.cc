#include "coordinator/prefix_cache.h"

#include <algorithm>
#include <limits>
#include <string_view>

#include "common/kv_share.h"
#include "policy/policy_writer.h"

namespace millipede {

PrefixReuse ReuseOf(const std::optional<AttentionPolicy>& policy) {
  if (!policy) return PrefixReuse::kAnyLength;
  bool dense_prefill = true, full_decode = true;
  for (const LayerPolicy& layer : policy->layers) {
    for (const HeadPrefillPolicy& head : layer.prefill)
      dense_prefill &= head.pattern == PrefillPattern::kDense;
    for (DecodeRole role : layer.decode) {
      if (role == DecodeRole::kStreamingHead) return PrefixReuse::kOwnLength;
      full_decode &= role == DecodeRole::kFull;
    }
  }
  if (!dense_prefill) return PrefixReuse::kChunkEnds;
  return full_decode ? PrefixReuse::kAnyLength : PrefixReuse::kPromptAnyLength;
}

const char* CacheTierName(CacheTier tier) {
  switch (tier) {
    case CacheTier::kDevice: return "device";
    case CacheTier::kHost: return "host";
    case CacheTier::kDisk: return "disk";
  }
  return "device";
}

void RankPositions::AddChunk(int64_t begin, int64_t count) {
  StatusOr<ShardPlan> plan = ShardPlan::Create(count, static_cast<int>(ranks_.size()));
  if (!plan.ok()) return;  // count < 1: nothing to add
  for (size_t r = 0; r < ranks_.size(); ++r)
    for (const TokenRange& piece : plan->RankPromptRanges(static_cast<int>(r)))
      if (!piece.empty()) AppendRange(&ranks_[r], {begin + piece.begin, begin + piece.end});
}

void RankPositions::AddDecode(int64_t position) {
  const int owner = ShardPlan::DecodeOwner(position, static_cast<int>(ranks_.size()));
  AppendRange(&ranks_[static_cast<size_t>(owner)], {position, position + 1});
}

void RankPositions::SetRank(int rank, std::vector<TokenRange> ranges) {
  if (rank >= 0 && rank < static_cast<int>(ranks_.size()))
    ranks_[static_cast<size_t>(rank)] = std::move(ranges);
}

RankPositions RankPositions::Before(int64_t length) const {
  RankPositions out(static_cast<int>(ranks_.size()));
  for (size_t r = 0; r < ranks_.size(); ++r)
    for (const TokenRange& range : ranks_[r]) {
      if (range.begin >= length) break;
      out.ranks_[r].push_back({range.begin, std::min(range.end, length)});
    }
  return out;
}

int64_t RankPositions::MaxRows() const {
  int64_t most = 0;
  for (const auto& ranges : ranks_) most = std::max(most, TotalSize(ranges));
  return most;
}

int64_t RankPositions::MinRows() const {
  int64_t fewest = std::numeric_limits<int64_t>::max();
  for (const auto& ranges : ranks_) fewest = std::min(fewest, TotalSize(ranges));
  return ranks_.empty() ? 0 : fewest;
}

int64_t RankPositions::total() const {
  int64_t n = 0;
  for (const auto& ranges : ranks_) n += TotalSize(ranges);
  return n;
}

StatusOr<PrefixCache> PrefixCache::Create(int64_t block_tokens, int num_ranks,
                                          std::string model_key) {
  MP_REQUIRE(num_ranks >= 1, "prefix cache: ", num_ranks, " ranks");
  MP_ASSIGN_OR_RETURN(PrefixIndex index, PrefixIndex::Create(block_tokens));
  return PrefixCache(std::move(index), num_ranks, std::move(model_key));
}

uint64_t PrefixCache::KeyOf(const std::optional<AttentionPolicy>& policy) const {
  const std::string policy_json = policy ? AttentionPolicyToJson(*policy) : "default";
  const std::string_view parts[] = {model_key_, policy_json};
  return PrefixKey(parts);
}

std::optional<PrefixStart> PrefixCache::Lookup(uint64_t key, std::span<const int32_t> prompt) {
  const PrefixHit hit = index_.Lookup(key, prompt);
  const auto n = static_cast<int64_t>(prompt.size());
  hit_tokens_ += hit.tokens;
  miss_tokens_ += n - hit.tokens;
  if (hit.tokens == 0) return std::nullopt;
  const Facts& facts = facts_.at(hit.entry);
  const std::optional<PrefixEntryInfo> info = index_.Info(hit.entry);
  const bool device = facts.tier == CacheTier::kDevice;
  if (facts.tier == CacheTier::kHost) ++host_hits_;
  if (facts.tier == CacheTier::kDisk) ++disk_hits_;
  PrefixStart start{hit.entry,
                    hit.tokens,
                    facts.positions.Before(hit.tokens),
                    device && info && !info->pinned && info->holders == 0,
                    facts.capacity,
                    facts.host_generated_rows};
  if (device)
    start.shared_rows = KvSharedRows(start.positions.MinRows(), facts.capacity, share_unit_rows_);
  if (const PrefixEntry* entry = index_.Find(hit.entry); entry && !entry->every_length) {
    for (int64_t length : entry->lengths)
      if (length < hit.tokens) start.reuse_lengths.push_back(length);
    start.reuse_lengths.push_back(hit.tokens);
  }
  return start;
}

Status PrefixCache::Hold(uint64_t entry) { return index_.Acquire(entry); }

void PrefixCache::Release(uint64_t entry) { (void)index_.Release(entry); }

void PrefixCache::Share(uint64_t entry) {
  if (auto it = facts_.find(entry); it != facts_.end()) ++it->second.sharers;
}

void PrefixCache::Unshare(uint64_t entry) {
  if (auto it = facts_.find(entry); it != facts_.end() && it->second.sharers > 0)
    --it->second.sharers;
}

Status PrefixCache::Pin(uint64_t entry, bool pinned) {
  if (!index_.Contains(entry))
    return NotFoundError("no prefix-cache entry " + std::to_string(entry));
  return index_.SetPinned(entry, pinned);
}

Status PrefixCache::Remove(uint64_t entry) {
  if (!index_.Contains(entry))
    return NotFoundError("no prefix-cache entry " + std::to_string(entry));
  MP_RETURN_IF_ERROR(index_.Remove(entry));
  Forget(entry);
  return OkStatus();
}

void PrefixCache::Forget(uint64_t entry) {
  auto it = facts_.find(entry);
  if (it == facts_.end()) return;
  if (it->second.tier != CacheTier::kDevice) used(it->second.tier) -= host_bytes_of(entry);
  if (it->second.promoting) host_used_ -= host_bytes_of(entry);
  facts_.erase(it);
}

namespace {

// The reuse lengths of an entry of `stored` positions whose prompt has `prompt` tokens.
void SetLengths(const EndedKv& ended, int64_t prompt, int64_t stored, PrefixEntry* entry) {
  entry->every_length = false;
  switch (ended.reuse) {
    case PrefixReuse::kAnyLength:
    case PrefixReuse::kPromptAnyLength:
      entry->every_length = true;
      break;
    case PrefixReuse::kChunkEnds:
      for (int64_t end : ended.chunk_ends)
        if (end <= std::min(prompt, stored) &&
            (entry->lengths.empty() || end > entry->lengths.back()))
          entry->lengths.push_back(end);
      break;
    case PrefixReuse::kOwnLength:
      entry->lengths.push_back(stored);
      break;
  }
}

}  // namespace

bool PrefixCache::Insert(const EndedKv& ended) {
  const auto prompt = static_cast<int64_t>(ended.prompt.size());
  const int64_t stored = ended.positions.total();
  PrefixEntry entry;
  entry.id = ended.job;
  entry.key = ended.key;
  entry.cost_per_rank = ended.cost_per_rank;
  // The tokens whose KV is reusable: generated ones only where decode attention is exact, or
  // where the entry is reused at its own length.
  int64_t reusable = std::min(stored, prompt);
  if (ended.reuse == PrefixReuse::kAnyLength || ended.reuse == PrefixReuse::kOwnLength)
    reusable = stored;
  if (reusable < index_.block_tokens()) return false;
  entry.tokens.assign(ended.prompt.begin(), ended.prompt.begin() + std::min(prompt, reusable));
  const int64_t more = reusable - static_cast<int64_t>(entry.tokens.size());
  if (more > static_cast<int64_t>(ended.generated.size())) return false;
  entry.tokens.insert(entry.tokens.end(), ended.generated.begin(), ended.generated.begin() + more);
  SetLengths(ended, prompt, reusable, &entry);
  if (!entry.every_length && entry.lengths.empty()) return false;
  if (!index_.Insert(std::move(entry)).ok()) return false;
  facts_[ended.job] = Facts{.positions = ended.positions,
                            .capacity = ended.capacity_per_rank,
                            .host_generated_rows = ended.host_generated_rows};
  return true;
}

void PrefixCache::SetHostTier(int64_t bytes_per_rank, int64_t position_bytes) {
  host_limit_ = std::max<int64_t>(bytes_per_rank, 0);
  position_bytes_ = std::max<int64_t>(position_bytes, 0);
}

std::vector<uint64_t> PrefixCache::DeviceEvictionOrder() const {
  std::vector<uint64_t> evictable, kept;
  const std::vector<PrefixEntryInfo> all = index_.List();  // most recently used first
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (tier_of(it->id) != CacheTier::kDevice || facts_.at(it->id).sharers > 0) continue;
    (!it->pinned && it->holders == 0 ? evictable : kept).push_back(it->id);
  }
  if (host_limit_ > 0 || disk_limit_ > 0)
    evictable.insert(evictable.end(), kept.begin(), kept.end());
  return evictable;
}

void PrefixCache::SetDiskTier(int64_t bytes_per_rank) {
  disk_limit_ = std::max<int64_t>(bytes_per_rank, 0);
}

void PrefixCache::MoveTo(uint64_t entry, CacheTier tier) {
  Facts& facts = facts_.at(entry);
  const int64_t bytes = host_bytes_of(entry);
  if (facts.tier != CacheTier::kDevice) used(facts.tier) -= bytes;
  facts.tier = tier;
  used(tier) += bytes;
}

bool PrefixCache::MakeRoom(CacheTier tier, int64_t bytes, PrefixEviction* out) {
  const int64_t limit = tier == CacheTier::kHost ? host_limit_ : disk_limit_;
  if (limit == 0 || bytes > limit) return false;
  std::vector<uint64_t> victims;
  int64_t room = limit - used(tier);
  for (uint64_t id : index_.EvictionOrder()) {
    if (room >= bytes) break;
    if (tier_of(id) != tier) continue;
    victims.push_back(id);
    room += host_bytes_of(id);
  }
  if (room < bytes) return false;
  for (uint64_t id : victims) {
    if (tier == CacheTier::kHost && MakeRoom(CacheTier::kDisk, host_bytes_of(id), out)) {
      MoveTo(id, CacheTier::kDisk);
      out->spilled.push_back(id);
      ++spills_;
      continue;
    }
    if (!index_.Remove(id).ok()) continue;
    Forget(id);
    (tier == CacheTier::kHost ? out->dropped_host : out->dropped_disk).push_back(id);
    ++evictions_;
  }
  return true;
}

bool PrefixCache::Demote(uint64_t entry, PrefixEviction* out) {
  const int64_t bytes = host_bytes_of(entry);
  if (MakeRoom(CacheTier::kHost, bytes, out)) {
    MoveTo(entry, CacheTier::kHost);
    out->demoted.push_back(entry);
    ++demotions_;
    return true;
  }
  if (MakeRoom(CacheTier::kDisk, bytes, out)) {
    MoveTo(entry, CacheTier::kDisk);
    out->spilled.push_back(entry);
    ++spills_;
    return true;
  }
  return false;
}

bool PrefixCache::StartPromotion(uint64_t entry, PrefixEviction* out) {
  auto it = facts_.find(entry);
  if (it == facts_.end() || it->second.tier != CacheTier::kDisk || it->second.promoting)
    return false;
  const int64_t bytes = host_bytes_of(entry);
  if (!MakeRoom(CacheTier::kHost, bytes, out)) return false;
  it->second.promoting = true;
  host_used_ += bytes;
  return true;
}

void PrefixCache::FinishPromotion(uint64_t entry) {
  auto it = facts_.find(entry);
  if (it == facts_.end() || !it->second.promoting) return;
  const int64_t bytes = host_bytes_of(entry);
  it->second.promoting = false;
  host_used_ -= bytes;
  MoveTo(entry, CacheTier::kHost);
  ++promotions_;
}

Status PrefixCache::AdoptDiskEntry(uint64_t id, uint64_t key, std::vector<int32_t> tokens,
                                   bool every_length, std::vector<int64_t> lengths,
                                   RankPositions positions) {
  PrefixEntry entry{.id = id, .key = key, .tokens = std::move(tokens),
                    .every_length = every_length, .lengths = std::move(lengths),
                    .cost_per_rank = positions.MaxRows()};
  MP_RETURN_IF_ERROR(index_.Insert(std::move(entry)));
  facts_[id] = Facts{std::move(positions), 0, false, CacheTier::kDevice};
  MoveTo(id, CacheTier::kDisk);
  return OkStatus();
}

std::vector<uint64_t> PrefixCache::TrimDisk() {
  std::vector<uint64_t> out;
  for (uint64_t id : index_.EvictionOrder()) {
    if (disk_used_ <= disk_limit_) break;
    if (tier_of(id) != CacheTier::kDisk || !index_.Remove(id).ok()) continue;
    Forget(id);
    out.push_back(id);
    ++evictions_;
  }
  return out;
}

PrefixEviction PrefixCache::Evict(int64_t need) {
  PrefixEviction out;
  int64_t freed = 0;
  for (uint64_t id : DeviceEvictionOrder()) {
    if (need >= 0 && freed >= need) break;
    const int64_t cost = cost_of(id);
    if (Demote(id, &out)) {
      freed += cost;
      continue;
    }
    const std::optional<PrefixEntryInfo> info = index_.Info(id);
    if (!info || info->pinned || info->holders > 0 || !index_.Remove(id).ok()) continue;
    Forget(id);
    freed += cost;
    out.dropped_device.push_back(id);
    ++evictions_;
  }
  return out;
}

int64_t PrefixCache::cost_of(uint64_t entry) const {
  const PrefixEntry* e = index_.Find(entry);
  return e == nullptr ? 0 : e->cost_per_rank;
}

CacheTier PrefixCache::tier_of(uint64_t entry) const {
  auto it = facts_.find(entry);
  return it == facts_.end() ? CacheTier::kDevice : it->second.tier;
}

int64_t PrefixCache::host_bytes_of(uint64_t entry) const {
  auto it = facts_.find(entry);
  return it == facts_.end() ? 0 : it->second.positions.MaxRows() * position_bytes_;
}

PrefixCacheStats PrefixCache::stats() const {
  PrefixCacheStats out{.entries = index_.size(),
                       .host_bytes_per_rank = host_used_,
                       .disk_bytes_per_rank = disk_used_,
                       .hit_tokens = hit_tokens_,
                       .miss_tokens = miss_tokens_,
                       .evictions = evictions_,
                       .demotions = demotions_,
                       .spills = spills_,
                       .host_hits = host_hits_,
                       .disk_hits = disk_hits_,
                       .promotions = promotions_};
  for (const auto& [id, facts] : facts_) {
    if (facts.tier == CacheTier::kHost) ++out.host_entries;
    if (facts.tier == CacheTier::kDisk) ++out.disk_entries;
    if (facts.tier == CacheTier::kDevice) out.cost_per_rank += cost_of(id);
  }
  return out;
}

}  // namespace millipede
