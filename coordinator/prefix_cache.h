// The prefix cache's policy on the coordinator: which ended jobs leave their KV on the workers
// as cache entries, at which lengths an entry may be reused, which positions of it each rank
// holds, and the lookup a new job makes (PrefixIndex: the hash chain). Pure code: the step
// scheduler counts the entries' KV, the step runner sends what the workers keep and drop.
//
// Reuse lengths (PrefixReuse, from the attention policy): the KV of positions [0, L) equals what
// an uncached run computes only where nothing after L shaped it and every row of it is still held:
//  - dense prefill and full decode everywhere: any length, generated tokens included;
//  - dense prefill, decode roles that attend to fewer keys (OmniKV, static eviction): any length
//    within the prompt (a generated token's KV came from sparse decode attention);
//  - sparse or a-shape prefill: the ends of the prompt's prefill chunks (a chunk's index is
//    estimated from its own last queries, so the KV inside a chunk depends on the whole chunk);
//  - a store that keeps a window only (streaming-head decode): the entry's own length alone.
//
// Tiers: an entry starts in the workers' backend memory (each rank's share, counted in the KV
// budget). An entry evicted from there moves down (its reservation freed) to the ranks' host
// memory (SetHostTier) where it fits, else to their local disks (SetDiskTier), else it is
// dropped. A lower tier makes room by moving its least recently used entries further down (host
// to disk) or dropping them. A hit on an entry below backend memory copies its KV back into the
// new job's memory; one on disk first moves the entry up to the host tier where it has room
// (StartPromotion: the workers read it back in the background, the job waits). Pinned entries and
// entries a job waits to copy are never dropped, but may move down. Disk entries outlive the
// service: at start the workers report them and AdoptDiskEntry indexes them again.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/shard_plan.h"
#include "common/status.h"
#include "coordinator/prefix_index.h"
#include "policy/attention_policy.h"

namespace millipede {

enum class PrefixReuse { kAnyLength, kPromptAnyLength, kChunkEnds, kOwnLength };
// The reuse rule of a job's policy (none: the workers' default, taken as dense: the service
// passes its workers' policy when they run another).
PrefixReuse ReuseOf(const std::optional<AttentionPolicy>& policy);

// Which positions each rank holds of one job's KV, as its steps placed them: a prefill chunk
// zig-zag over the ranks (ShardPlan), a decode token on DecodeOwner.
class RankPositions {
 public:
  explicit RankPositions(int num_ranks = 1)
      : ranks_(static_cast<size_t>(std::max(num_ranks, 1))) {}
  void AddChunk(int64_t begin, int64_t count);
  void AddDecode(int64_t position);
  // Rank `rank`'s positions, as reported (increasing, disjoint); ignored for a rank out of range.
  void SetRank(int rank, std::vector<TokenRange> ranges);
  // The positions before `length`.
  RankPositions Before(int64_t length) const;
  // Rows the busiest rank holds, and the rank holding the fewest.
  int64_t MaxRows() const;
  int64_t MinRows() const;
  // Positions over all ranks.
  int64_t total() const;

 private:
  std::vector<std::vector<TokenRange>> ranks_;
};

enum class CacheTier { kDevice, kHost, kDisk };
const char* CacheTierName(CacheTier tier);  // "device", "host", "disk"

// A hit for a new job: restore [0, tokens) from entry `entry`, whose positions there are
// `positions`. `exclusive`: nothing else wants the entry (not pinned, no job holds it) and it is
// in backend memory, so a job it has room for (`capacity` KV positions per rank) may take it
// over (Remove) rather than copy it (Hold).
struct PrefixStart {
  uint64_t entry = 0;
  int64_t tokens = 0;
  RankPositions positions;
  bool exclusive = false;
  int64_t capacity = 0;
  int64_t host_generated_rows = -1;  // EndedKv's
  // KV positions per rank (on the rank sharing the fewest) that a copy from this hit maps from
  // the entry rather than allocates (common/kv_share.h): 0 but for an entry in backend memory
  // with shared blocks on (SetShareUnit).
  int64_t shared_rows = 0;
  // The entry's reuse lengths up to `tokens` (ending with it) when it has listed ones (sparse
  // prefill, window stores); empty when every length is.
  std::vector<int64_t> reuse_lengths;
};

// What an ended job left on the workers, for PrefixCache::Insert.
struct EndedKv {
  uint64_t job = 0;
  uint64_t key = 0;
  PrefixReuse reuse = PrefixReuse::kAnyLength;
  std::span<const int32_t> prompt;
  // Generated tokens whose KV was stored (every one but the last sampled), and where its prompt
  // prefill chunks ended.
  std::span<const int32_t> generated;
  std::span<const int64_t> chunk_ends;
  RankPositions positions;  // of every stored position
  int64_t cost_per_rank = 0;
  int64_t capacity_per_rank = 0;  // what its sequence has room for on each rank
  // Generated rows its sequence's host-tier layers have room for on each rank (a job taking it
  // over must fit its own there, and its context beside them); -1: no host-tier layers.
  int64_t host_generated_rows = -1;
};

// What Evict did: entries moved to the host tier (from backend memory) and to the disk tier
// (from either), and entries freed from each tier, each list in order.
struct PrefixEviction {
  std::vector<uint64_t> demoted, spilled;
  std::vector<uint64_t> dropped_device, dropped_host, dropped_disk;
};

struct PrefixCacheStats {
  int64_t entries = 0;        // in every tier
  int64_t cost_per_rank = 0;  // KV positions the device-tier entries hold on the busiest rank
  int64_t host_entries = 0, disk_entries = 0;
  // What the host-tier and disk-tier entries count on the busiest rank.
  int64_t host_bytes_per_rank = 0, disk_bytes_per_rank = 0;
  int64_t hit_tokens = 0, miss_tokens = 0;  // prompt tokens reused / prefilled, cumulative
  int64_t evictions = 0;                    // entries dropped, cumulative
  int64_t demotions = 0;                    // entries moved to the host tier, cumulative
  int64_t spills = 0;                       // entries moved to the disk tier, cumulative
  int64_t host_hits = 0, disk_hits = 0;     // lookups answered from those tiers, cumulative
  int64_t promotions = 0;                   // entries moved from disk to host, cumulative
};

class PrefixCache {
 public:
  // `model_key`: what identifies the model and the workers' KV format (it seeds every key).
  static StatusOr<PrefixCache> Create(int64_t block_tokens, int num_ranks, std::string model_key);

  // The key of a job's KV: the model's, its policy's (canonical JSON; none: the default) .
  uint64_t KeyOf(const std::optional<AttentionPolicy>& policy) const;
  // The longest cached prefix of `prompt` under `key`; none on a miss. Counts the job's prompt
  // tokens as hit and missed. The caller then holds the entry (Hold: not evictable until
  // Release) or takes it over (Remove: the entry leaves the cache, its KV becomes the job's).
  std::optional<PrefixStart> Lookup(uint64_t key, std::span<const int32_t> prompt);
  // The tokens Lookup would give `prompt` now (0: a miss), counting nothing.
  int64_t Peek(uint64_t key, std::span<const int32_t> prompt) const {
    return index_.Peek(key, prompt).tokens;
  }
  // Counts a prompt of `prompt_tokens` whose first `reused` came from elsewhere than an entry
  // (a running job's stored prompt) as Lookup counts a hit.
  void CountReuse(int64_t prompt_tokens, int64_t reused) {
    hit_tokens_ += reused;
    miss_tokens_ += prompt_tokens - reused;
  }
  Status Hold(uint64_t entry);
  void Release(uint64_t entry);
  // A running job maps entry `entry`'s memory (a copy sharing its blocks): until Unshare, the
  // entry is neither demoted nor dropped (the job holds it too), as its memory would not be
  // freed.
  void Share(uint64_t entry);
  void Unshare(uint64_t entry);
  // The unit of the workers' shared blocks (WorkerHello::kv_share_unit_rows); 0: none shared.
  void SetShareUnit(int64_t unit_rows) { share_unit_rows_ = std::max<int64_t>(unit_rows, 0); }
  // Pins or unpins an entry; removes one (its positions forgotten; the caller drops its KV).
  // NotFound for an unknown id; Remove is FailedPrecondition while a job holds the entry.
  Status Pin(uint64_t entry, bool pinned);
  Status Remove(uint64_t entry);
  // Registers an ended job's KV as entry `ended.job` when it holds at least one reusable block;
  // false when it does not (the caller frees it).
  bool Insert(const EndedKv& ended);
  // A host tier of `bytes_per_rank` on each rank, an entry counted at `position_bytes` per
  // position it holds on its busiest rank; 0 bytes: none (evicted entries are dropped).
  void SetHostTier(int64_t bytes_per_rank, int64_t position_bytes);
  // A disk tier of `bytes_per_rank` on each rank (counted as the host tier counts); 0: none.
  void SetDiskTier(int64_t bytes_per_rank);
  // An entry the workers found on their disks at start, every rank's share (`positions`) of
  // KV for `tokens` under `key`: indexed in the disk tier. InvalidArgument when the index
  // refuses it (an id in use, no tokens, lengths out of range).
  Status AdoptDiskEntry(uint64_t id, uint64_t key, std::vector<int32_t> tokens,
                        bool every_length, std::vector<int64_t> lengths, RankPositions positions);
  // Drops the disk tier's least recently used evictable entries while it holds more than its
  // size (after AdoptDiskEntry); their ids.
  std::vector<uint64_t> TrimDisk();
  // Moves disk-tier entry `entry` up to the host tier, where MakeRoom finds (or makes, into
  // `out`) room for it: its bytes count in the host tier from now on, and stay counted in the
  // disk tier until FinishPromotion. False, changing nothing, when the host tier has no room, or
  // the entry is not on disk or already moving up.
  bool StartPromotion(uint64_t entry, PrefixEviction* out);
  // Every rank has read the entry back: it is in the host tier.
  void FinishPromotion(uint64_t entry);
  // Frees device-tier entries, least recently used first, until their cost reaches `need` (all
  // of them for need < 0): each moves down where a lower tier has (or can make) room, else is
  // dropped when evictable (not pinned, not held), else left.
  PrefixEviction Evict(int64_t need);
  int64_t cost_of(uint64_t entry) const;
  // The entry's tier (kDevice for an unknown id).
  CacheTier tier_of(uint64_t entry) const;
  const std::string& model_key() const { return model_key_; }
  PrefixCacheStats stats() const;
  const PrefixIndex& index() const { return index_; }

 private:
  PrefixCache(PrefixIndex index, int num_ranks, std::string model_key)
      : index_(std::move(index)), num_ranks_(num_ranks), model_key_(std::move(model_key)) {}

  PrefixIndex index_;
  int num_ranks_ = 1;
  std::string model_key_;
  struct Facts {
    RankPositions positions;
    int64_t capacity = 0;
    int64_t host_generated_rows = -1;
    CacheTier tier = CacheTier::kDevice;
    bool promoting = false;  // on disk, its bytes also counted in the host tier (StartPromotion)
    int64_t sharers = 0;     // running jobs mapping its memory (Share)
  };
  // Device-tier entries in the order Evict takes them: the evictable ones least recently used
  // first, then (with a host tier) the pinned and held ones, which may only be demoted.
  std::vector<uint64_t> DeviceEvictionOrder() const;
  // Moves device-tier `entry` to the host tier, else the disk tier, where MakeRoom finds room;
  // false, changing nothing, when neither has.
  bool Demote(uint64_t entry, PrefixEviction* out);
  // Frees `bytes` in `tier` (host or disk) by moving its least recently used evictable entries
  // down (host to disk, where it has room) or dropping them; false, changing nothing, when even
  // all of them would not free enough.
  bool MakeRoom(CacheTier tier, int64_t bytes, PrefixEviction* out);
  // Moves `entry` to `tier` (below its own), counting its bytes there.
  void MoveTo(uint64_t entry, CacheTier tier);
  int64_t& used(CacheTier tier) { return tier == CacheTier::kHost ? host_used_ : disk_used_; }
  int64_t host_bytes_of(uint64_t entry) const;
  // Forgets an entry the index no longer has.
  void Forget(uint64_t entry);

  std::map<uint64_t, Facts> facts_;  // by entry
  int64_t host_limit_ = 0, position_bytes_ = 0, host_used_ = 0;
  int64_t disk_limit_ = 0, disk_used_ = 0;
  int64_t hit_tokens_ = 0, miss_tokens_ = 0, evictions_ = 0, demotions_ = 0, spills_ = 0;
  int64_t host_hits_ = 0, disk_hits_ = 0, promotions_ = 0;
  int64_t share_unit_rows_ = 0;
};

}  // namespace millipede
