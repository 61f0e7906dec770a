// The prefix cache's index: the block hash chain, Lookup's candidates and their confirmation,
// holders, pins and least-recently-used order.
#include "coordinator/prefix_index.h"

#include <algorithm>
#include <string>

namespace millipede {
namespace {

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ULL;
constexpr uint64_t kFnvPrime = 0x100000001b3ULL;

uint64_t Fnv1a(uint64_t h, const unsigned char* bytes, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    h ^= bytes[i];
    h *= kFnvPrime;
  }
  return h;
}

// The chain hash of a block whose predecessor's chain hash (or, for block 0, the key) is `prev`.
uint64_t BlockHash(uint64_t prev, std::span<const int32_t> block) {
  uint64_t h = prev ^ 0x9e3779b97f4a7c15ULL;
  for (int32_t t : block) {
    h = (h ^ static_cast<uint32_t>(t)) * 0xff51afd7ed558ccdULL;
    h ^= h >> 32;
  }
  // The splitmix64 finaliser: every bit of the block reaches every bit of the hash.
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
  return h ^ (h >> 31);
}

// The number of leading blocks on which two chains agree, by bisection (agreement at block i
// means agreement at every block before it, up to a hash collision). Whatever collisions there
// are, the result D has a[D] != b[D] or D == min(a.size(), b.size()).
int64_t AgreeingBlocks(std::span<const uint64_t> a, std::span<const uint64_t> b) {
  size_t lo = 0, hi = std::min(a.size(), b.size());
  while (lo < hi) {
    const size_t mid = lo + (hi - lo + 1) / 2;
    if (a[mid - 1] == b[mid - 1]) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return static_cast<int64_t>(lo);
}

// The first position at or after `from` where `a` and `b` differ (or the shorter one's end).
int64_t FirstDifference(std::span<const int32_t> a, std::span<const int32_t> b, int64_t from) {
  const int64_t end = static_cast<int64_t>(std::min(a.size(), b.size()));
  auto first = std::mismatch(a.begin() + from, a.begin() + end, b.begin() + from);
  return static_cast<int64_t>(first.first - a.begin());
}

Status EntryNotFound(uint64_t id) {
  return NotFoundError("prefix index: no entry " + std::to_string(id));
}

}  // namespace

uint64_t PrefixKey(std::span<const std::string_view> parts) {
  uint64_t h = kFnvOffset;
  for (std::string_view part : parts) {
    // The length as 8 little-endian bytes, whatever the machine's byte order.
    unsigned char length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(part.size() >> (8 * i));
    h = Fnv1a(h, length, sizeof(length));
    h = Fnv1a(h, reinterpret_cast<const unsigned char*>(part.data()), part.size());
  }
  return h;
}

StatusOr<PrefixIndex> PrefixIndex::Create(int64_t block_tokens) {
  MP_REQUIRE(block_tokens >= 1, "prefix index: block_tokens must be at least 1, got ",
             block_tokens);
  return PrefixIndex(block_tokens);
}

int64_t PrefixIndex::block_tokens() const { return block_tokens_; }

std::vector<uint64_t> PrefixIndex::Chain(uint64_t key, std::span<const int32_t> tokens,
                                         bool known_only) const {
  const size_t block = static_cast<size_t>(block_tokens_);
  std::vector<uint64_t> chain;
  chain.reserve(tokens.size() / block);
  uint64_t prev = key;
  for (size_t begin = 0; begin + block <= tokens.size(); begin += block) {
    prev = BlockHash(prev, tokens.subspan(begin, block));
    if (known_only && !blocks_.contains(prev)) break;
    chain.push_back(prev);
  }
  return chain;
}

Status PrefixIndex::Insert(PrefixEntry entry) {
  const uint64_t id = entry.id;
  const int64_t size = static_cast<int64_t>(entry.tokens.size());
  MP_REQUIRE(id != 0, "prefix index: entry id 0 is not an id");
  MP_REQUIRE(!Contains(id), "prefix index: entry ", id, " is already present");
  MP_REQUIRE(size > 0, "prefix index: entry ", id, " has no tokens");
  MP_REQUIRE(entry.cost_per_rank >= 0, "prefix index: entry ", id, " has a negative cost");
  for (size_t i = 0; i < entry.lengths.size(); ++i) {
    const int64_t length = entry.lengths[i];
    MP_REQUIRE(length >= 1 && length <= size, "prefix index: entry ", id, " has reuse length ",
               length, " outside [1, ", size, "]");
    MP_REQUIRE(i == 0 || entry.lengths[i - 1] < length, "prefix index: entry ", id,
               "'s reuse lengths are not strictly ascending");
  }
  Slot slot;
  slot.chain = Chain(entry.key, entry.tokens, /*known_only=*/false);
  for (uint64_t h : slot.chain) blocks_[h].push_back(id);
  slot.entry = std::move(entry);
  Touch(slots_.emplace(id, std::move(slot)).first->second);
  return OkStatus();
}

Status PrefixIndex::Remove(uint64_t id) {
  auto it = slots_.find(id);
  if (it == slots_.end()) return EntryNotFound(id);
  if (it->second.holders > 0)
    return FailedPreconditionError("prefix index: entry " + std::to_string(id) + " is held by " +
                                   std::to_string(it->second.holders) + " job(s)");
  for (uint64_t h : it->second.chain) {
    auto block = blocks_.find(h);
    if (block == blocks_.end()) continue;  // a collision within the entry's own chain
    std::erase(block->second, id);
    if (block->second.empty()) blocks_.erase(block);
  }
  by_use_.erase(it->second.last_use);
  slots_.erase(it);
  return OkStatus();
}

bool PrefixIndex::Contains(uint64_t id) const { return slots_.contains(id); }

const PrefixEntry* PrefixIndex::Find(uint64_t id) const {
  auto it = slots_.find(id);
  return it != slots_.end() ? &it->second.entry : nullptr;
}

int64_t PrefixIndex::Reusable(const PrefixEntry& entry, int64_t match) const {
  int64_t length = 0;
  if (entry.every_length) {
    length = std::min(match, static_cast<int64_t>(entry.tokens.size()));
  } else {
    auto above = std::upper_bound(entry.lengths.begin(), entry.lengths.end(), match);
    length = above == entry.lengths.begin() ? 0 : *(above - 1);
  }
  return length >= block_tokens_ ? length : 0;
}

std::vector<PrefixIndex::Candidate> PrefixIndex::Candidates(
    uint64_t key, std::span<const int32_t> prompt, std::span<const uint64_t> hashes) const {
  const int64_t most = static_cast<int64_t>(prompt.size()) - 1;
  std::vector<Candidate> candidates;
  auto first = blocks_.find(hashes[0]);
  if (first == blocks_.end()) return candidates;
  for (uint64_t id : first->second) {
    const Slot& slot = slots_.at(id);
    if (slot.entry.key != key) continue;
    // The hashes rule out agreement at block `agreeing`, so the match ends within it: the tokens
    // from there on are compared here, the ones before it by Confirm.
    const int64_t believed = AgreeingBlocks(slot.chain, hashes) * block_tokens_;
    const int64_t upper = FirstDifference(slot.entry.tokens, prompt, believed);
    const int64_t bound = Reusable(slot.entry, std::min(upper, most));
    if (bound > 0) candidates.push_back({&slot, believed, bound});
  }
  return candidates;
}

int64_t PrefixIndex::Confirm(const Candidate& candidate, std::span<const int32_t> prompt) const {
  const std::vector<int32_t>& tokens = candidate.slot->entry.tokens;
  if (std::equal(prompt.begin(), prompt.begin() + candidate.believed, tokens.begin()))
    return candidate.bound;
  // A hash collision: the tokens differ before where the hashes said.
  const int64_t match = FirstDifference(tokens, prompt, 0);
  return Reusable(candidate.slot->entry, std::min(match, static_cast<int64_t>(prompt.size()) - 1));
}

PrefixHit PrefixIndex::Lookup(uint64_t key, std::span<const int32_t> prompt) {
  const PrefixHit best = Peek(key, prompt);
  if (best.tokens == 0) return {};
  Slot& hit = slots_.at(best.entry);
  ++hit.hits;
  Touch(hit);
  return best;
}

PrefixHit PrefixIndex::Peek(uint64_t key, std::span<const int32_t> prompt) const {
  if (static_cast<int64_t>(prompt.size()) - 1 < block_tokens_) return {};
  const std::vector<uint64_t> hashes = Chain(key, prompt, /*known_only=*/true);
  if (hashes.empty()) return {};
  std::vector<Candidate> candidates = Candidates(key, prompt, hashes);
  // Largest bound first, the most recently used first among equal bounds: once a candidate's
  // bound cannot beat the best confirmed reuse, none after it can.
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return a.bound != b.bound ? a.bound > b.bound : a.slot->last_use > b.slot->last_use;
  });
  const Slot* best = nullptr;
  int64_t best_tokens = 0;
  for (const Candidate& c : candidates) {
    if (best != nullptr && (c.bound < best_tokens ||
                            (c.bound == best_tokens && c.slot->last_use < best->last_use)))
      break;
    const int64_t tokens = Confirm(c, prompt);
    if (tokens == 0) continue;
    if (best == nullptr || tokens > best_tokens ||
        (tokens == best_tokens && c.slot->last_use > best->last_use)) {
      best = c.slot;
      best_tokens = tokens;
    }
  }
  if (best == nullptr) return {};
  return {best->entry.id, best_tokens};
}

void PrefixIndex::Touch(Slot& slot) {
  by_use_.erase(slot.last_use);
  slot.last_use = ++uses_;
  by_use_[slot.last_use] = slot.entry.id;
}

Status PrefixIndex::Acquire(uint64_t id) {
  auto it = slots_.find(id);
  if (it == slots_.end()) return EntryNotFound(id);
  ++it->second.holders;
  return OkStatus();
}

Status PrefixIndex::Release(uint64_t id) {
  auto it = slots_.find(id);
  if (it == slots_.end()) return EntryNotFound(id);
  MP_REQUIRE(it->second.holders > 0, "prefix index: entry ", id, " released more than acquired");
  --it->second.holders;
  return OkStatus();
}

Status PrefixIndex::SetPinned(uint64_t id, bool pinned) {
  auto it = slots_.find(id);
  if (it == slots_.end()) return EntryNotFound(id);
  it->second.pinned = pinned;
  return OkStatus();
}

std::vector<uint64_t> PrefixIndex::EvictionOrder() const {
  std::vector<uint64_t> order;
  for (const auto& [use, id] : by_use_)
    if (Evictable(slots_.at(id))) order.push_back(id);
  return order;
}

std::vector<PrefixEntryInfo> PrefixIndex::List() const {
  std::vector<PrefixEntryInfo> infos;
  infos.reserve(slots_.size());
  for (auto it = by_use_.rbegin(); it != by_use_.rend(); ++it)
    infos.push_back(InfoOf(slots_.at(it->second)));
  return infos;
}

std::optional<PrefixEntryInfo> PrefixIndex::Info(uint64_t id) const {
  auto it = slots_.find(id);
  if (it == slots_.end()) return std::nullopt;
  return InfoOf(it->second);
}

PrefixEntryInfo PrefixIndex::InfoOf(const Slot& s) {
  return {s.entry.id, static_cast<int64_t>(s.entry.tokens.size()), s.entry.cost_per_rank,
          s.pinned, s.holders, s.last_use, s.hits};
}

int64_t PrefixIndex::size() const { return static_cast<int64_t>(slots_.size()); }

int64_t PrefixIndex::cost_per_rank() const {
  int64_t sum = 0;
  for (const auto& [id, s] : slots_) sum += s.entry.cost_per_rank;
  return sum;
}

int64_t PrefixIndex::evictable_cost_per_rank() const {
  int64_t sum = 0;
  for (const auto& [id, s] : slots_) sum += Evictable(s) ? s.entry.cost_per_rank : 0;
  return sum;
}

}  // namespace millipede
