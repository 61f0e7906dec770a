#include "worker/engine/sequence_table.h"

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <string>
#include <utility>
#include <vector>

#include "common/logging.h"
#include "policy/head_groups.h"

namespace millipede {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;
constexpr size_t kFields = 5;  // ok, device need, device free, host need, host free
// The follow-up step a kept sequence's host-tier layers leave room for when they move to the
// device (MoveHostTierUp): a question after a document. A larger one moves layers back down at
// its take-over (MakeRoomToTakeOver).
constexpr int64_t kFollowUpRows = 16384;

// Adds the seconds since its construction to `*total` when it ends.
class AddSeconds {
 public:
  explicit AddSeconds(double* total) : total_(total) {}
  ~AddSeconds() {
    *total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  double* total_;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

// What pinned memory (a host tier) may take: the host's available memory less a reserve for the
// system and the process's own allocations, since page-locked memory is never swapped out: the
// larger of 4 GiB and a tenth of the host's memory.
int64_t PinnableHostBytes(const BackendMemory& host) {
  return std::max<int64_t>(0, host.free_bytes - std::max(4 * kGiB, host.total_bytes / 10));
}

}  // namespace

const Sequence* SequenceTable::Find(SequenceId id) const {
  auto it = sequences_.find(id);
  return it == sequences_.end() ? nullptr : it->second.get();
}

Sequence* SequenceTable::FindMutable(SequenceId id) {
  auto it = sequences_.find(id);
  return it == sequences_.end() ? nullptr : it->second.get();
}

int64_t SequenceTable::KvBytes() const {
  int64_t bytes = 0;
  for (const auto& [id, s] : sequences_) bytes += s->KvBytes();
  return bytes;
}

int64_t SequenceTable::SharedKvBytes() const {
  int64_t bytes = 0;
  for (const auto& [id, s] : sequences_) bytes += s->SharedKvBytes();
  return bytes;
}

int64_t SequenceTable::HostKvBytes() const {
  int64_t bytes = 0;
  for (const auto& [id, s] : sequences_) bytes += s->HostKvBytes();
  return bytes;
}

StatusOr<SequenceMemoryPlan> SequenceTable::Plan(const SequenceOptions& options,
                                                 int64_t ring_rows) const {
  const int64_t step = options.step_tokens > 0 ? options.step_tokens : options.capacity;
  SequenceMemoryPlan plan = PlanSequenceMemory(ctx_.config(), ctx_.memory_shape(),
                                               std::max<int64_t>(options.capacity, 1), step,
                                               ring_rows);
  MP_RETURN_IF_ERROR(Sequence::PlanStores(ctx_.config(), ctx_.options.kv_dtype, options,
                                          ctx_.memory_shape().attention_chunk, &plan));
  plan.workspace_held_bytes = ctx_.workspace->NumBytes();
  plan.index_held_bytes = ctx_.workspace->sparse.NumBytes();
  return plan;
}

StatusOr<int64_t> SequenceTable::MaxPositionsNow() {
  MP_ASSIGN_OR_RETURN(BackendMemory memory, ctx_.backend->Memory());
  // What the sequences and the step buffers hold would be freed first.
  const int64_t held = KvBytes() + ctx_.workspace->NumBytes() + ctx_.workspace->sparse.NumBytes();
  return MaxSequencePositions(ctx_.config(), ctx_.memory_shape(), memory.free_bytes + held);
}

Status SequenceTable::PlanLocal(SequenceOptions* options, int64_t ring_rows, int64_t shared,
                                SequenceMemoryPlan* plan, int64_t need_free[4]) {
  MP_ASSIGN_OR_RETURN(const BackendMemory device, ctx_.backend->Memory());
  // On the CPU backend the host tier is the backend's own memory.
  const bool one_memory = ctx_.backend->kind() == BackendKind::kCpu;
  BackendMemory host = device;
  if (!one_memory) {
    MP_ASSIGN_OR_RETURN(host, HostMemory());
  }
  if (options->selected_kv == SelectedKvTier::kAuto)
    options->selected_kv = ctx_.options.selected_kv;
  if (options->selected_kv == SelectedKvTier::kAuto) {
    // The device while it holds everything; else the host tier for the fewest selected layers
    // that let it hold the rest (every candidate when none does: the refusal shows that plan).
    options->selected_kv = SelectedKvTier::kDevice;
    MP_ASSIGN_OR_RETURN(*plan, Plan(*options, ring_rows));
    const int64_t candidates =
        static_cast<int64_t>(HostTierCandidates(options->policy).size());
    if (!one_memory && candidates > 0 && plan->total() > device.free_bytes) {
      options->selected_kv = SelectedKvTier::kHost;
      options->host_tier_movable = true;
      for (options->host_tier_layers = 1; options->host_tier_layers < candidates;
           ++options->host_tier_layers) {
        MP_ASSIGN_OR_RETURN(*plan, Plan(*options, ring_rows));
        if (plan->total() <= device.free_bytes) break;
      }
    }
  }
  MP_ASSIGN_OR_RETURN(*plan, Plan(*options, ring_rows));
  need_free[0] = plan->total() - shared + (one_memory ? plan->host_kv_bytes : 0);
  need_free[1] = device.free_bytes;
  need_free[2] = one_memory ? 0 : plan->host_kv_bytes;
  need_free[3] = one_memory ? 0 : PinnableHostBytes(host);
  return OkStatus();
}

Status SequenceTable::CheckRanks(const std::vector<int64_t>& all, const SequenceOptions& options,
                                 const SequenceMemoryPlan& plan) const {
  for (int r = 0; r < ctx_.comm->size(); ++r) {
    const int64_t* m = &all[kFields * static_cast<size_t>(r)];
    MP_REQUIRE(m[0] == 1, "rank ", r, " refused the sequence (its log says why)");
    const std::string plan_text = r == ctx_.comm->rank() ? " = " + plan.ToString() : "";
    if (m[1] > m[2]) {
      const std::string where = ctx_.backend->kind() == BackendKind::kCuda ? "GPU" : "host";
      return ResourceExhaustedError(
          "the sequence does not fit: rank " + std::to_string(r) + " needs " +
          FormatBytes(m[1]) + " for " + std::to_string(options.capacity) + " positions" +
          plan_text + " but its " + where + " has " + FormatBytes(m[2]) +
          " free (weights already loaded); use more ranks or a shorter prompt");
    }
    if (m[3] > m[4])
      return ResourceExhaustedError(
          "the sequence does not fit: rank " + std::to_string(r) + " needs " +
          FormatBytes(m[3]) + " of pinned host memory for the context rows of its host-tier "
          "layers" + plan_text + " but its host can pin " + FormatBytes(m[4]) +
          " (its available memory less a reserve of max(4 GiB, 10% of its memory)); use more "
          "ranks (nodes), a shorter prompt or fewer host-tier layers");
  }
  return OkStatus();
}

bool SequenceTable::OnDisk(SequenceId id) const {
  return disk_ != nullptr && (disk_->Pending(static_cast<uint64_t>(id)) != nullptr ||
                              disk_->Info(static_cast<uint64_t>(id)).has_value());
}

const Sequence* SequenceTable::FindSource(SequenceId id) const {
  const Sequence* kept = FindCached(id);
  return kept != nullptr ? kept : Find(id);
}

Status SequenceTable::PrefixSource(const CachedPrefix& prefix, SequenceOptions* options) const {
  if (prefix.take && FindCached(prefix.from) == nullptr && Find(prefix.from) != nullptr)
    return InvalidArgumentError("running sequence " + std::to_string(prefix.from) +
                                " cannot be taken over");
  const Sequence* live = FindSource(prefix.from);
  const SavedSequence* saved = live != nullptr ? nullptr : FindSaved(prefix.from);
  if (live == nullptr && saved == nullptr && disk_ != nullptr)
    saved = disk_->Pending(static_cast<uint64_t>(prefix.from));
  std::optional<SavedSequenceFileInfo> file;
  if (live == nullptr && saved == nullptr && disk_ != nullptr)
    file = disk_->Info(static_cast<uint64_t>(prefix.from));
  if (live == nullptr && saved == nullptr && !file)
    return NotFoundError("cached sequence " + std::to_string(prefix.from) + " is not held");
  const SequenceOptions& src =
      live != nullptr ? live->options() : saved != nullptr ? saved->options() : file->options;
  const int64_t length =
      live != nullptr ? live->length() : saved != nullptr ? saved->length() : file->length;
  if (prefix.length < 1 || prefix.length > length)
    return InvalidArgumentError("a cached prefix of " + std::to_string(prefix.length) +
                                " positions from a sequence of " + std::to_string(length));
  // The same stores as the source's: its tier for selected layers, its head groups.
  options->selected_kv = src.selected_kv;
  options->host_tier_layers = src.host_tier_layers;
  options->host_tier_movable = src.host_tier_movable;
  options->split_kv_heads = options->split_kv_heads && Sequence::SplitsKvHeads(src);
  options->cached_prefix = true;
  return OkStatus();
}

const Sequence* SequenceTable::ShareSource(const std::optional<CachedPrefix>& prefix) const {
  // Kept sequences only: a running job's end frees, in the coordinator's count, memory that a
  // sequence mapping it would still hold.
  if (!prefix || !prefix->share || prefix->take) return nullptr;
  return FindCached(prefix->from);
}

Status SequenceTable::RestorePrefix(Sequence& sequence, const CachedPrefix& prefix) const {
  if (const Sequence* live = FindSource(prefix.from))
    return sequence.RestorePrefix(*ctx_.backend, *live, prefix.length);
  AddSeconds timed(&load_s_);
  const SavedSequence* saved = FindSaved(prefix.from);
  if (saved == nullptr && disk_ != nullptr) saved = disk_->Pending(static_cast<uint64_t>(prefix.from));
  if (saved != nullptr) return sequence.RestorePrefix(*ctx_.backend, *saved, prefix.length);
  if (disk_ == nullptr)
    return NotFoundError("cached sequence " + std::to_string(prefix.from) + " is not held");
  // From the disk tier: read (and checked) into host memory, copied in, freed.
  MP_ASSIGN_OR_RETURN(const SavedSequence read,
                      disk_->Read(*ctx_.backend, static_cast<uint64_t>(prefix.from),
                                  ctx_.config()));
  return sequence.RestorePrefix(*ctx_.backend, read, prefix.length);
}

Status SequenceTable::Start(SequenceId id, SequenceOptions options, const Status& checked,
                            const std::optional<CachedPrefix>& prefix) {
  if (options.step_tokens <= 0) options.step_tokens = options.capacity;
  options.split_kv_heads = options.split_kv_heads && ctx_.options.split_kv_heads;
  options.ranks = ctx_.comm->size();
  Status local;
  if (options.capacity <= 0 || options.capacity > ctx_.max_context())
    local = InvalidArgumentError("sequence capacity " + std::to_string(options.capacity) +
                                 " outside [1, " + std::to_string(ctx_.max_context()) + "]");
  else if (Find(id) != nullptr || FindCached(id) != nullptr || FindSaved(id) != nullptr ||
           OnDisk(id))
    local = FailedPreconditionError("sequence " + std::to_string(id) + " is already running");
  if (local.ok()) local = checked;
  if (local.ok() && prefix) local = PrefixSource(*prefix, &options);
  // Every rank learns every rank's capacity (the most rows its ring block can reach: the rows it
  // holds and a step's, as chunked prefill grows them), needs and free memory.
  const int num_ranks = ctx_.comm->size();
  int64_t mine[kFields] = {std::max(options.capacity, options.step_tokens), 0, 0, 0, 0};
  std::vector<int64_t> all(kFields * static_cast<size_t>(num_ranks));
  int64_t ring_rows = mine[0];
  if (num_ranks > 1) {
    MP_RETURN_IF_ERROR(ctx_.comm->HostAllGather(mine, all.data(), sizeof(int64_t)));
    for (int r = 0; r < num_ranks; ++r) ring_rows = std::max(ring_rows, all[r]);
    // Steps forced to pass-Q borrow the ring blocks for their queries and partials.
    ring_rows = std::max(ring_rows, ctx_.ForcedPassQRingRows(ring_rows));
  }
  // The plan decides the path, the same on every rank (the coordinator takes over entries in
  // backend memory only; one held below it is copied whatever the plan says).
  const bool below = prefix && (FindSaved(prefix->from) != nullptr || OnDisk(prefix->from));
  if (prefix && prefix->take && !below)
    return TakeCached(id, options, ring_rows, *prefix, std::move(local));
  SequenceMemoryPlan plan;
  const Sequence* share = local.ok() ? ShareSource(prefix) : nullptr;
  const int64_t shared = share != nullptr ? Sequence::SharedBytes(*share, prefix->length) : 0;
  if (shared > 0) {
    MP_LOG(INFO) << "sequence " << id << " maps " << FormatBytes(shared) << " of cached sequence "
                 << prefix->from << " (shared blocks)";
  }
  if (local.ok()) local = PlanLocal(&options, ring_rows, shared, &plan, mine + 1);
  mine[0] = local.ok() ? 1 : 0;
  if (num_ranks > 1) {
    MP_RETURN_IF_ERROR(ctx_.comm->HostAllGather(mine, all.data(), sizeof(mine)));
  } else {
    std::copy(mine, mine + kFields, all.begin());
  }
  Status started = local;
  if (started.ok()) started = CheckRanks(all, options, plan);
  if (started.ok()) started = Allocate(id, std::move(options), ring_rows, prefix);
  // A saved entry given up to this start (a take) goes whatever happened.
  if (prefix && prefix->take) {
    saved_.erase(prefix->from);
    if (disk_ != nullptr) disk_->Drop(static_cast<uint64_t>(prefix->from));
  }
  return started;
}

Status SequenceTable::Allocate(SequenceId id, SequenceOptions options, int64_t ring_rows,
                               const std::optional<CachedPrefix>& prefix) {
  // The plan fitted everywhere; an allocation can still fail on one rank, and then no rank may
  // keep the sequence (the others would wait for it in the next step's collectives).
  Status made = ctx_.workspace->Reserve(options.step_tokens, ring_rows, ctx_.comm->size(), 1);
  std::unique_ptr<Sequence> sequence;
  double allocate_s = 0, restore_s = 0;
  if (made.ok()) {
    AddSeconds timed(&allocate_s);
    const Sequence* share = ShareSource(prefix);
    StatusOr<std::unique_ptr<Sequence>> s =
        Sequence::Create(id, *ctx_.backend, ctx_.config(), ctx_.options.kv_dtype,
                         std::move(options), share, share ? prefix->length : 0);
    if (s.ok()) sequence = std::move(s).value(); else made = s.status();
  }
  if (made.ok() && prefix) {
    AddSeconds timed(&restore_s);
    made = RestorePrefix(*sequence, *prefix);
  }
  if (made.ok() && prefix) {
    MP_LOG(INFO) << "sequence " << id << " starts from " << prefix->length
                 << " positions of cached sequence " << prefix->from << ": memory in " << std::fixed
                 << std::setprecision(3) << allocate_s << " s, rows in " << restore_s << " s";
  }
  const Status agreed = ctx_.AgreeToContinue(made.ok());
  if (!made.ok() || !agreed.ok()) {
    if (sequences_.empty()) ctx_.workspace->Release();
    MP_RETURN_IF_ERROR(made);
    return FailedPreconditionError("another rank could not allocate the sequence (its log says "
                                   "why)");
  }
  sequences_[id] = std::move(sequence);
  return OkStatus();
}

Status SequenceTable::Keep(SequenceId id) {
  auto it = sequences_.find(id);
  if (it == sequences_.end())
    return NotFoundError("sequence " + std::to_string(id) + " is not running");
  if (cached_.count(id) > 0 || saved_.count(id) > 0 || OnDisk(id))
    return FailedPreconditionError("the prefix cache already holds sequence " + std::to_string(id));
  Sequence& kept = *it->second;
  cached_[id] = std::move(it->second);
  sequences_.erase(it);
  if (sequences_.empty()) ctx_.workspace->Release();
  MoveHostTierUp(kept);
  return OkStatus();
}

StatusOr<int64_t> SequenceTable::FewestHostLayersThatFit(const Sequence& s, int64_t lo, int64_t hi,
                                                         int64_t step, int64_t ring_rows) const {
  MP_ASSIGN_OR_RETURN(const BackendMemory device, ctx_.backend->Memory());
  // The sequence's own device memory is given back by the new layout.
  const int64_t room = device.free_bytes + s.KvBytes() - s.HostKvBytes();
  SequenceOptions o = s.options();
  o.selected_kv = SelectedKvTier::kHost;
  o.step_tokens = step;
  o.cached_prefix = true;
  for (o.host_tier_layers = lo; o.host_tier_layers < hi; ++o.host_tier_layers) {
    MP_ASSIGN_OR_RETURN(const SequenceMemoryPlan plan, Plan(o, ring_rows));
    if (plan.total() <= room) return o.host_tier_layers;
  }
  return hi;
}

void SequenceTable::MoveHostTierUp(Sequence& s) {
  if (!s.options().host_tier_movable || s.host_layers() == 0) return;
  const auto started = std::chrono::steady_clock::now();
  const int64_t step = std::min(std::max<int64_t>(1, s.options().step_tokens), kFollowUpRows);
  const int64_t ring_rows = std::max(s.options().capacity, step);
  const int64_t before = s.host_layers(), host_bytes = s.HostKvBytes();
  StatusOr<int64_t> fits = FewestHostLayersThatFit(s, 0, before, step, ring_rows);
  Status moved = fits.status();
  if (moved.ok() && *fits == before) return;
  if (moved.ok())
    moved = s.Relayout(*ctx_.backend, ctx_.config(), ctx_.options.kv_dtype, *fits, step);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (!moved.ok()) {
    MP_LOG(WARNING) << "kept sequence " << s.id()
                    << ": its host-tier layers stay in host memory: " << moved.ToString();
    return;
  }
  load_s_ += seconds;
  MP_LOG(INFO) << "kept sequence " << s.id() << ": " << before - s.host_layers()
               << " host-tier layers moved to the device ("
               << FormatBytes(host_bytes - s.HostKvBytes()) << " in " << seconds << " s), "
               << s.host_layers() << " left in host memory";
}

Status SequenceTable::MakeRoomToTakeOver(Sequence& s, const SequenceOptions& options,
                                         int64_t ring_rows) {
  if (!s.options().host_tier_movable) return OkStatus();
  const int64_t step = std::max<int64_t>(1, options.step_tokens);
  const auto candidates = static_cast<int64_t>(HostTierCandidates(s.options().policy).size());
  MP_ASSIGN_OR_RETURN(const int64_t m,
                      FewestHostLayersThatFit(s, s.host_layers(), candidates, step, ring_rows));
  if (m == s.host_layers()) return OkStatus();
  AddSeconds timed(&save_s_);
  MP_LOG(INFO) << "sequence " << s.id() << ": " << m - s.host_layers()
               << " more layers' context rows move to host memory for a follow-up step of " << step
               << " tokens";
  return s.Relayout(*ctx_.backend, ctx_.config(), ctx_.options.kv_dtype, m, step);
}

Status SequenceTable::RelayoutCached(SequenceId id, int64_t host_layers) {
  auto it = cached_.find(id);
  if (it == cached_.end())
    return NotFoundError("sequence " + std::to_string(id) + " is not cached in backend memory");
  Sequence& s = *it->second;
  return s.Relayout(*ctx_.backend, ctx_.config(), ctx_.options.kv_dtype, host_layers,
                    std::max<int64_t>(1, s.options().step_tokens));
}

Status SequenceTable::Demote(SequenceId id) {
  auto it = cached_.find(id);
  if (it == cached_.end())
    return NotFoundError("sequence " + std::to_string(id) + " is not cached in backend memory");
  AddSeconds timed(&save_s_);
  MP_ASSIGN_OR_RETURN(SavedSequence saved, SavedSequence::Save(*ctx_.backend, *it->second));
  saved_.insert_or_assign(id, std::move(saved));
  cached_.erase(it);
  return OkStatus();
}

Status SequenceTable::Spill(SequenceId id, DiskEntryMeta meta) {
  if (disk_ == nullptr) return FailedPreconditionError("this worker has no disk tier");
  meta.id = static_cast<uint64_t>(id);
  if (auto live = cached_.find(id); live != cached_.end()) {
    AddSeconds timed(&save_s_);
    MP_ASSIGN_OR_RETURN(SavedSequence saved, SavedSequence::Save(*ctx_.backend, *live->second));
    disk_->Write(std::move(meta), std::move(saved));
    cached_.erase(live);
    return OkStatus();
  }
  auto saved = saved_.find(id);
  if (saved == saved_.end())
    return NotFoundError("sequence " + std::to_string(id) + " is not cached in memory");
  disk_->Write(std::move(meta), std::move(saved->second));
  saved_.erase(saved);
  return OkStatus();
}

void SequenceTable::Promote(SequenceId id) {
  if (OnDisk(id)) {
    disk_->Promote(*ctx_.backend, static_cast<uint64_t>(id), ctx_.config());
  } else if (saved_.count(id) > 0) {
    promotions_.promoted.push_back(id);
  } else {
    MP_LOG(WARNING) << "KV cache: entry " << id << " is not on disk to read back";
    promotions_.failed.push_back(id);
  }
}

SequenceTable::Promotions SequenceTable::CollectPromotions() {
  Promotions out = std::exchange(promotions_, {});
  if (disk_ == nullptr) return out;
  for (DiskTier::Promotion& p : disk_->TakePromoted()) {
    const auto id = static_cast<SequenceId>(p.id);
    if (!p.read.ok()) {
      MP_LOG(WARNING) << "KV cache: entry " << p.id
                      << " not read back: " << p.read.status().ToString();
      out.failed.push_back(id);
      continue;
    }
    saved_.insert_or_assign(id, std::move(p.read).value());
    disk_->Drop(p.id);
    MP_LOG(INFO) << "KV cache: entry " << p.id << " read back into host memory";
    out.promoted.push_back(id);
  }
  return out;
}

bool SequenceTable::DropCached(SequenceId id) {
  const bool live = cached_.erase(id) > 0;
  const bool saved = saved_.erase(id) > 0;
  const bool disk = OnDisk(id);
  if (disk) disk_->Drop(static_cast<uint64_t>(id));
  return live || saved || disk;
}

const Sequence* SequenceTable::FindCached(SequenceId id) const {
  auto it = cached_.find(id);
  return it == cached_.end() ? nullptr : it->second.get();
}

const SavedSequence* SequenceTable::FindSaved(SequenceId id) const {
  auto it = saved_.find(id);
  return it == saved_.end() ? nullptr : &it->second;
}

int64_t SequenceTable::CachedKvBytes() const {
  int64_t bytes = 0;
  for (const auto& [id, s] : cached_) bytes += s->KvBytes();
  for (const auto& [id, s] : saved_) bytes += s.NumBytes();
  return bytes;
}

int64_t SequenceTable::CachedHostKvBytes() const {
  int64_t bytes = 0;
  for (const auto& [id, s] : cached_) bytes += s->HostKvBytes();
  for (const auto& [id, s] : saved_) bytes += s.NumBytes();
  return bytes;
}

Status SequenceTable::TakeCached(SequenceId id, const SequenceOptions& options,
                                 int64_t ring_rows, const CachedPrefix& prefix, Status local) {
  auto it = cached_.find(prefix.from);
  if (local.ok()) local = it->second->CanTakeOver(options, prefix.length);
  Status made = ctx_.AgreeToContinue(local.ok());
  if (made.ok()) made = MakeRoomToTakeOver(*it->second, options, ring_rows);
  if (made.ok())
    made = ctx_.workspace->Reserve(options.step_tokens, ring_rows, ctx_.comm->size(), 1);
  if (made.ok()) made = it->second->TakeOver(*ctx_.backend, id, options, prefix.length);
  const Status agreed = ctx_.AgreeToContinue(made.ok());
  if (!made.ok() || !agreed.ok() || !local.ok()) {
    if (it != cached_.end()) cached_.erase(it);
    if (sequences_.empty()) ctx_.workspace->Release();
    MP_RETURN_IF_ERROR(local);
    // Cancelled: the agreement (another rank refused); anything else is this rank's own.
    if (!made.ok() && made.code() != StatusCode::kCancelled) return made;
    return FailedPreconditionError("another rank could not take the cached sequence over (its "
                                   "log says why)");
  }
  sequences_[id] = std::move(it->second);
  cached_.erase(it);
  return OkStatus();
}

bool SequenceTable::End(SequenceId id) {
  const bool erased = sequences_.erase(id) > 0;
  if (sequences_.empty()) ctx_.workspace->Release();
  return erased;
}

}  // namespace millipede
