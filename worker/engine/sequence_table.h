// The engine's sequences and the memory plan every rank checks before one starts.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>

#include "common/status.h"
#include "worker/engine/disk_tier.h"
#include "worker/engine/engine_context.h"
#include "worker/engine/saved_sequence.h"
#include "worker/engine/sequence.h"
#include "worker/memory_plan.h"

namespace millipede {

// A start from the prefix cache: the new sequence holds the KV of positions [0, length) of
// the cached sequence `from` (SequenceTable::Keep) before its first step: a copy, or with
// `take` the cached sequence itself (Sequence::TakeOver: its memory as it is, the entry gone).
// From an entry in the host tier (SequenceTable::Demote) it is always a copy; `take` then
// frees the saved entry once the start is done or refused. `from` may also be a running
// sequence whose prompt is stored (a copy of it, never a take).
// With `share`, a copy from a cached sequence in backend memory maps its whole chunks of rows
// before `length` rather than copying them (Sequence::Create): the prefix cache's shared blocks,
// which the coordinator keeps from being taken over or evicted while the new sequence runs.
struct CachedPrefix {
  SequenceId from = 0;
  int64_t length = 0;
  bool take = false;
  bool share = false;
};

class SequenceTable {
 public:
  explicit SequenceTable(EngineContext& ctx) : ctx_(ctx) {}

  // Starts sequence `id` (not running yet) with room for options.capacity positions on this rank
  // (Engine::StartSequence has the contract). `checked` is the caller's verdict on the options'
  // policy: a failure there refuses the sequence on this rank, and so on every rank.
  // With `prefix`, the sequence starts holding a cached sequence's KV (Sequence::RestorePrefix),
  // its stores laid out as that one's (tier of selected layers, head groups); a restore that
  // fails on any rank fails the start on every rank. A take-over (prefix->take) allocates no
  // KV; when it fails on any rank the cached sequence is freed on every rank (the coordinator
  // gave the entry up when it planned the take).
  Status Start(SequenceId id, SequenceOptions options, const Status& checked,
               const std::optional<CachedPrefix>& prefix = std::nullopt);
  // Frees the sequence's KV stores; false when it did not exist. When no sequence is left the
  // step buffers are freed too.
  bool End(SequenceId id);

  // ---- The prefix cache's entries on this rank: sequences kept after their job ----
  // Moves running sequence `id` into the cache, its stores and length as they are; it runs no
  // more steps. NotFound when it is not running; FailedPrecondition when the cache has the id.
  Status Keep(SequenceId id);
  // Lays cached sequence `id` out again with its first `host_layers` (-1: all) host-tier
  // candidates in the host tier (Sequence::Relayout, slots for its own steps): what Keep and a
  // take-over do on their own for a movable host tier. NotFound when it is not cached in backend
  // memory.
  Status RelayoutCached(SequenceId id, int64_t host_layers);
  // Moves cached sequence `id` to the host tier: its KV saved to host memory (SavedSequence),
  // its stores freed. NotFound when it is not cached in backend memory; a failed save (no host
  // memory) leaves it where it was.
  Status Demote(SequenceId id);
  // Moves cached sequence `id` (from backend memory or the host tier) to the disk tier, written
  // with `meta` by the tier's thread. FailedPrecondition without a disk tier; NotFound when it
  // is not cached; a failed save leaves it where it was.
  Status Spill(SequenceId id, DiskEntryMeta meta);
  // Moves disk-tier entry `id` up to the host tier: its file is read (and checked) on the disk
  // tier's reader thread, and CollectPromotions puts it in the host tier once read. An entry
  // already in the host tier counts as promoted; one in neither tier as failed.
  void Promote(SequenceId id);
  // The promotions that ended since the last call: the entries now in the host tier (their
  // files removed) and those that are not (a damaged file, removed; an unknown entry).
  struct Promotions {
    std::vector<SequenceId> promoted, failed;
  };
  Promotions CollectPromotions();
  // Gives the table a disk tier (the worker's --kv-cache-dir).
  void AttachDiskTier(std::unique_ptr<DiskTier> disk) { disk_ = std::move(disk); }
  DiskTier* disk_tier() const { return disk_.get(); }
  // Frees a cached sequence, in any tier; false when there was none.
  bool DropCached(SequenceId id);
  const Sequence* FindCached(SequenceId id) const;
  // A sequence a new one may copy a prefix from in backend memory: a cached one, else a running
  // one (its stored prompt, which its decode only appends to).
  const Sequence* FindSource(SequenceId id) const;
  const SavedSequence* FindSaved(SequenceId id) const;
  // Entries in backend memory and the host tier (the disk tier's: disk_tier()->Entries()).
  int64_t num_cached() const { return static_cast<int64_t>(cached_.size() + saved_.size()); }
  // Bytes the cache's entries hold (both tiers; saved entries are host memory), and in the
  // host tier.
  int64_t CachedKvBytes() const;
  int64_t CachedHostKvBytes() const;
  // Bytes of the disk tier's entries (on disk and queued).
  int64_t CachedDiskBytes() const { return disk_ ? disk_->bytes() : 0; }
  // Seconds spent, cumulative: saving cached sequences to host memory (Demote, Spill: in the
  // step), writing them to disk (the disk tier's thread), and restoring starts from either.
  struct CacheSeconds {
    double save = 0, write = 0, load = 0;
  };
  CacheSeconds cache_seconds() const {
    return {save_s_, disk_ ? disk_->write_seconds() : 0.0, load_s_};
  }

  const Sequence* Find(SequenceId id) const;
  Sequence* FindMutable(SequenceId id);
  int64_t size() const { return static_cast<int64_t>(sequences_.size()); }
  // Bytes held by every sequence's KV stores on this rank (both tiers), and in the host tier.
  int64_t KvBytes() const;
  int64_t HostKvBytes() const;
  // Of KvBytes, the cached sequences' blocks that running ones map (Sequence::SharedKvBytes).
  int64_t SharedKvBytes() const;
  // The plan Start checks, for this rank (ring rows: the widest rank's step).
  StatusOr<SequenceMemoryPlan> Plan(const SequenceOptions& options, int64_t ring_rows) const;
  // The most positions this rank could hold in one dense sequence if the engine were empty.
  StatusOr<int64_t> MaxPositionsNow();

 private:
  // This rank's plan for `*options` (a kAuto tier for selected layers resolved), what it needs
  // of the backend's memory and of pinned host memory, and what each has free: need_free =
  // {device need, device free, host need, host free} (on the CPU backend, one memory: the host
  // tier counts in the device's).
  // `shared`: bytes of the plan's device KV that the sequence maps from a cached one.
  Status PlanLocal(SequenceOptions* options, int64_t ring_rows, int64_t shared,
                   SequenceMemoryPlan* plan, int64_t need_free[4]);
  // Every rank's verdict and numbers (`all`: 5 per rank) checked: the first refusal, as an error.
  Status CheckRanks(const std::vector<int64_t>& all, const SequenceOptions& options,
                    const SequenceMemoryPlan& plan) const;
  // Allocates the step buffers and the sequence; every rank keeps it or none does.
  Status Allocate(SequenceId id, SequenceOptions options, int64_t ring_rows,
                  const std::optional<CachedPrefix>& prefix);
  // A kept sequence whose host tier was the plan's choice (SequenceOptions::host_tier_movable):
  // its host-tier layers move to the device as far as the device has room beside a follow-up
  // step of up to kFollowUpRows tokens (Sequence::Relayout). Best effort: a failure is logged and
  // leaves the layout as it was.
  void MoveHostTierUp(Sequence& sequence);
  // Before a take-over by a job of `options`: when the device lacks room for its step beside the
  // sequence, host-tier layers move back down as far as needed (a movable host tier only).
  Status MakeRoomToTakeOver(Sequence& sequence, const SequenceOptions& options, int64_t ring_rows);
  // The fewest host-tier layers in [lo, hi) with which `s`, laid out again for a follow-up of
  // steps of `step` tokens, fits the device (its free memory and the sequence's own device
  // memory, which the new layout replaces); hi when none does.
  StatusOr<int64_t> FewestHostLayersThatFit(const Sequence& s, int64_t lo, int64_t hi, int64_t step,
                                            int64_t ring_rows) const;
  // The take-over start: `local` is this rank's verdict on the start so far.
  Status TakeCached(SequenceId id, const SequenceOptions& options, int64_t ring_rows,
                    const CachedPrefix& prefix, Status local);
  // A start from `prefix`: checks that its source (a cached or a saved sequence) is held and
  // long enough, and lays `options` out as the source's stores.
  Status PrefixSource(const CachedPrefix& prefix, SequenceOptions* options) const;
  // Whether the disk tier holds entry `id` (queued or written).
  bool OnDisk(SequenceId id) const;
  // The cached sequence a start from `prefix` maps chunks of (CachedPrefix::share), if any.
  const Sequence* ShareSource(const std::optional<CachedPrefix>& prefix) const;
  // Restores `prefix` into the new `sequence` from whichever tier holds it.
  Status RestorePrefix(Sequence& sequence, const CachedPrefix& prefix) const;

  EngineContext& ctx_;
  std::map<SequenceId, std::unique_ptr<Sequence>> sequences_;
  std::map<SequenceId, std::unique_ptr<Sequence>> cached_;
  std::map<SequenceId, SavedSequence> saved_;  // the host tier
  Promotions promotions_;                      // ended at once (Promote), for CollectPromotions
  std::unique_ptr<DiskTier> disk_;             // the disk tier, if any
  double save_s_ = 0;
  mutable double load_s_ = 0;  // RestorePrefix is const towards the table's entries
};

}  // namespace millipede
