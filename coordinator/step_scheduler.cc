#include "coordinator/step_scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "coordinator/admission.h"

namespace millipede {

int64_t PlannedStep::decode_tokens() const {
  int64_t n = 0;
  for (const PlannedEntry& e : entries) n += e.kind == PlannedKind::kDecode ? 1 : 0;
  return n;
}

int64_t PlannedStep::prefill_tokens() const {
  int64_t n = 0;
  for (const PlannedEntry& e : entries) n += e.kind == PlannedKind::kPrefill ? e.count : 0;
  return n;
}

StatusOr<StepScheduler> StepScheduler::Create(const StepSchedulerOptions& options) {
  MP_REQUIRE(options.num_ranks >= 1, "step scheduler: ", options.num_ranks, " ranks");
  MP_REQUIRE(options.max_step_tokens >= 1, "step scheduler: max_step_tokens must be at least 1");
  MP_REQUIRE(options.max_running >= 1 && options.max_running <= options.max_step_tokens,
             "step scheduler: max_running (", options.max_running, ") must lie in [1, ",
             "max_step_tokens = ", options.max_step_tokens, "]: every decoding job runs each step");
  MP_REQUIRE(options.kv_positions_per_rank >= 1,
             "step scheduler: kv_positions_per_rank must be at least 1");
  MP_REQUIRE(options.max_prefill_work >= 0 && options.min_chunk >= 1,
             "step scheduler: max_prefill_work must be >= 0 and min_chunk >= 1");
  MP_REQUIRE(options.max_prefill_work <= (int64_t{1} << 52),
             "step scheduler: max_prefill_work must be at most 2^52, got ",
             options.max_prefill_work);
  MP_REQUIRE(options.ring_pairs_per_row >= 0 && options.ring_pairs_per_row <= (int64_t{1} << 32),
             "step scheduler: ring_pairs_per_row must lie in [0, 2^32], got ",
             options.ring_pairs_per_row);
  return StepScheduler(options);
}

int64_t StepScheduler::ReservationPerRank(int64_t prompt_tokens, int64_t max_new_tokens,
                                          int num_ranks) {
  return KvPositionsPerRank(prompt_tokens, max_new_tokens, num_ranks);
}

int64_t StepScheduler::CachedReservationPerRank(int64_t prefix_rows, int64_t cached_tokens,
                                                int64_t prompt_tokens, int64_t max_new_tokens,
                                                int num_ranks) {
  return prefix_rows + PromptRowsBoundPerRank(prompt_tokens - cached_tokens, num_ranks) +
         DecodeRowsPerRank(max_new_tokens, num_ranks);
}

Status StepScheduler::Add(StepJobId job, int64_t prompt_tokens, int64_t max_new_tokens,
                          int64_t kv_cost_per_rank, const std::optional<CachedStart>& cached,
                          bool keep) {
  MP_REQUIRE(jobs_.count(job) == 0 && cached_.count(job) == 0, "step scheduler: job ", job,
             " was added twice");
  MP_REQUIRE(prompt_tokens >= 1 && max_new_tokens >= 1, "step scheduler: job ", job, " has prompt ",
             prompt_tokens, " and max_new_tokens ", max_new_tokens);
  Job j;
  j.prompt = prompt_tokens;
  j.max_new = max_new_tokens;
  j.keep = keep;
  j.reservation = ReservationPerRank(prompt_tokens, max_new_tokens, options_.num_ranks);
  MP_REQUIRE(kv_cost_per_rank >= 0, "step scheduler: job ", job, " has a negative KV cost");
  j.cost = kv_cost_per_rank > 0 ? kv_cost_per_rank : j.reservation;
  if (cached) {
    MP_RETURN_IF_ERROR(StartFromCache(job, *cached, &j));
  } else if (j.cost > options_.kv_positions_per_rank) {
    return OutOfRangeError("job " + std::to_string(job) + " needs " + std::to_string(j.cost) +
                           " KV positions per rank; " +
                           std::to_string(options_.kv_positions_per_rank) + " exist");
  }
  j.arrival = arrivals_++;
  jobs_[job] = j;
  return OkStatus();
}

Status StepScheduler::StartFromCache(StepJobId id, const CachedStart& cached, Job* j) {
  MP_REQUIRE(cached.entry != 0 && cached.tokens >= 1 && cached.tokens < j->prompt &&
                 cached.prefix_rows >= 0,
             "step scheduler: job ", id, " starts from a cached prefix of ", cached.tokens,
             " tokens of ", j->prompt);
  const int64_t reservation = CachedReservationPerRank(cached.prefix_rows, cached.tokens, j->prompt,
                                                       j->max_new, options_.num_ranks);
  int64_t cost = CopyCost(*j, cached);
  auto entry = cached_.find(cached.entry);
  if (cached.take) {
    MP_REQUIRE(entry != cached_.end() && cached.capacity >= reservation, "step scheduler: job ", id,
               " takes over entry ", cached.entry, " which is not cached or too small");
    cost = entry->second;
  }
  if (cost > options_.kv_positions_per_rank)
    return OutOfRangeError("job " + std::to_string(id) + " needs " + std::to_string(cost) +
                           " KV positions per rank; " +
                           std::to_string(options_.kv_positions_per_rank) + " exist");
  j->shared = cached.take ? 0 : SharedCost(*j, cached);
  j->cost = cost - j->shared;
  j->reservation = cached.take ? cached.capacity : reservation;
  j->cached = j->prefilled = cached.tokens;
  j->cached_from = cached.entry;
  if (cached.take) {
    j->taken = true;
    cached_cost_ -= entry->second;
    cached_.erase(entry);
  }
  return OkStatus();
}

int64_t StepScheduler::CopyCost(const Job& j, const CachedStart& cached) const {
  const int64_t reservation = CachedReservationPerRank(cached.prefix_rows, cached.tokens, j.prompt,
                                                       j.max_new, options_.num_ranks);
  // A job that takes the whole budget (admission.h: OmniKV with host-tier layers) still does.
  const int64_t whole = options_.kv_positions_per_rank;
  return j.cost >= whole ? whole : j.cost + std::max<int64_t>(0, reservation - j.reservation);
}

StatusOr<int64_t> StepScheduler::CopyStartCost(StepJobId job, const CachedStart& cached) const {
  auto it = jobs_.find(job);
  MP_REQUIRE(it != jobs_.end() && !it->second.started && it->second.cached_from == 0 &&
                 cached.tokens >= 1 && cached.tokens < it->second.prompt,
             "step scheduler: job ", job, " cannot start from ", cached.tokens, " cached tokens");
  return CopyCost(it->second, cached) - SharedCost(it->second, cached);
}

int64_t StepScheduler::SharedCost(const Job& j, const CachedStart& cached) const {
  if (cached.shared_rows <= 0) return 0;
  // A job that takes the whole budget (OmniKV with host-tier layers) still does.
  if (CopyCost(j, cached) >= options_.kv_positions_per_rank) return 0;
  // Its cost in positions of dense KV per position reserved: a window store's heads share none.
  const double dense = j.reservation > 0 ? static_cast<double>(j.cost) / j.reservation : 1.0;
  return std::min(cached.shared_rows,
                  static_cast<int64_t>(static_cast<double>(cached.shared_rows) * dense));
}

Status StepScheduler::Park(StepJobId job) {
  auto it = jobs_.find(job);
  MP_REQUIRE(it != jobs_.end() && !it->second.started, "step scheduler: job ", job,
             " is not waiting");
  it->second.parked = true;
  return OkStatus();
}

Status StepScheduler::Unpark(StepJobId job, const std::optional<CachedStart>& cached) {
  auto it = jobs_.find(job);
  MP_REQUIRE(it != jobs_.end() && it->second.parked && (!cached || it->second.cached_from == 0),
             "step scheduler: job ", job, " is not parked, or has a cached start already");
  if (cached) MP_RETURN_IF_ERROR(StartFromCache(job, *cached, &it->second));
  it->second.parked = false;
  return OkStatus();
}

bool StepScheduler::parked(StepJobId job) const {
  auto it = jobs_.find(job);
  return it != jobs_.end() && it->second.parked;
}

void StepScheduler::Remove(StepJobId job, bool freed_by_workers, bool keep) {
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return;
  if (it->second.taken && !it->second.started) {
    // Its entry's KV is still the workers' under the entry's id.
    reserved_ -= it->second.cost;
    pending_drops_.push_back(it->second.cached_from);
  }
  if (it->second.started) {
    --running_;
    memory_blocked_ = false;
    if (keep) {
      // The reservation stays with the entry, and the blocks it shared count as its own from
      // now on (until the entry it shared them with goes, they are counted twice).
      const int64_t kept = it->second.cost + it->second.shared;
      reserved_ += it->second.shared;
      cached_[job] = kept;
      cached_cost_ += kept;
      if (!freed_by_workers) pending_keeps_.push_back(job);
    } else {
      reserved_ -= it->second.cost;
      if (!freed_by_workers) pending_ends_.push_back(job);
    }
  }
  jobs_.erase(it);
}

bool StepScheduler::ReleaseCached(uint64_t entry) {
  auto it = cached_.find(entry);
  if (it == cached_.end()) return false;
  reserved_ -= it->second;
  cached_cost_ -= it->second;
  memory_blocked_ = false;
  cached_.erase(it);
  return true;
}

void StepScheduler::DropCached(uint64_t entry) {
  if (ReleaseCached(entry)) pending_drops_.push_back(entry);
}

void StepScheduler::DemoteCached(uint64_t entry) {
  if (ReleaseCached(entry)) pending_demotes_.push_back(entry);
}

void StepScheduler::SpillCached(uint64_t entry) {
  ReleaseCached(entry);
  pending_spills_.push_back(entry);
}

void StepScheduler::DropSaved(uint64_t entry) { pending_drops_.push_back(entry); }

void StepScheduler::PromoteSaved(uint64_t entry) { pending_promotes_.push_back(entry); }

Status StepScheduler::RestartUncached(StepJobId job) {
  auto it = jobs_.find(job);
  MP_REQUIRE(it != jobs_.end() && it->second.started && !it->second.taken, "step scheduler: job ",
             job, " was not started from a copied prefix");
  Job& j = it->second;
  j.started = false;
  --running_;
  reserved_ -= j.cost;
  j.prefilled = j.cached;
  ForgetCachedStart(job);
  return OkStatus();
}

std::optional<StepJobId> StepScheduler::NextWaiting() const {
  for (StepJobId id : PrefillOrder())
    if (!jobs_.at(id).started) return id;
  return std::nullopt;
}

int64_t StepScheduler::KvShortfall() const {
  if (memory_blocked_) return -1;
  if (running_ >= options_.max_running) return 0;
  const std::optional<StepJobId> next = NextWaiting();
  if (!next) return 0;
  const Job& j = jobs_.at(*next);
  const int64_t lack = reserved_ + (j.taken ? 0 : j.cost) - options_.kv_positions_per_rank;
  return std::max<int64_t>(lack, 0);
}

void StepScheduler::ForgetCachedStart(StepJobId job) {
  auto it = jobs_.find(job);
  if (it == jobs_.end() || it->second.started || it->second.cached_from == 0) return;
  Job& j = it->second;
  if (j.taken) {
    reserved_ -= j.cost;
    pending_drops_.push_back(j.cached_from);
    j.taken = false;
  }
  j.cost += j.shared;
  j.shared = 0;
  const int64_t uncached = ReservationPerRank(j.prompt, j.max_new, options_.num_ranks);
  j.cost -= std::max<int64_t>(0, j.reservation - uncached);
  j.reservation = uncached;
  j.cached = j.prefilled = 0;
  j.cached_from = 0;
}

bool StepScheduler::holds_kv(StepJobId job) const {
  auto it = jobs_.find(job);
  return it != jobs_.end() && it->second.started;
}

int64_t StepScheduler::kv_cost(StepJobId job) const {
  auto it = jobs_.find(job);
  return it == jobs_.end() ? 0 : it->second.cost;
}

int64_t StepScheduler::kept_cost(StepJobId job) const {
  auto it = jobs_.find(job);
  return it == jobs_.end() ? 0 : it->second.cost + it->second.shared;
}

bool StepScheduler::shares_blocks(StepJobId job) const {
  auto it = jobs_.find(job);
  return it != jobs_.end() && it->second.shared > 0;
}

int64_t StepScheduler::reservation(StepJobId job) const {
  auto it = jobs_.find(job);
  return it == jobs_.end() ? 0 : it->second.reservation;
}

std::vector<StepJobId> StepScheduler::PrefillOrder() const {
  // (group, remaining, arrival): starved partly prefilled jobs, then the one the workers
  // refused for memory, then everyone by what is left.
  std::vector<std::tuple<int, int64_t, uint64_t, StepJobId>> order;
  for (const auto& [id, j] : jobs_) {
    if ((j.started && j.prefilled == j.prompt) || j.parked) continue;
    const int group = j.started && j.starved ? 0 : (j.refused ? 1 : 2);
    order.emplace_back(group, j.prompt - j.prefilled, j.arrival, id);
  }
  std::sort(order.begin(), order.end());
  std::vector<StepJobId> ids;
  for (const auto& entry : order) ids.push_back(std::get<3>(entry));
  return ids;
}

int64_t StepScheduler::RingChunk() const {
  return (options_.num_ranks - 1) * options_.ring_pairs_per_row;
}

double StepScheduler::ChunkWork(int64_t before, int64_t chunk) const {
  return static_cast<double>(before + chunk) *
         static_cast<double>(std::max(chunk, RingChunk()));
}

int64_t StepScheduler::decoding() const {
  int64_t n = 0;
  for (const auto& [id, j] : jobs_) n += j.started && j.prefilled == j.prompt ? 1 : 0;
  return n;
}

double StepScheduler::StepWork(const PlannedStep& step) const {
  double work = 0;
  for (const PlannedEntry& e : step.entries)
    if (e.kind == PlannedKind::kPrefill) work += ChunkWork(e.begin, e.count);
  return work / options_.num_ranks;
}

int64_t StepScheduler::ChunkFor(const Job& j, int64_t tokens_left, int64_t work_left,
                                bool first) const {
  const int64_t remaining = j.prompt - j.prefilled;
  const int64_t ring = RingChunk();
  int64_t chunk = std::min(remaining, tokens_left);
  if (work_left < std::numeric_limits<int64_t>::max()) {
    // The largest c with c * (prefilled + c) <= work_left.
    const double b = static_cast<double>(j.prefilled), w = static_cast<double>(work_left);
    int64_t by_work = static_cast<int64_t>((-b + std::sqrt(b * b + 4.0 * w)) / 2.0);
    // Below R positions the ring pass is the cost: (prefilled + c) x R <= work_left.
    if (by_work < ring) by_work = std::min(by_work, static_cast<int64_t>(w / ring - b));
    chunk = std::min(chunk, std::max<int64_t>(by_work, 0));
  }
  // Slivers cost a step's overheads (and, over a ring, a whole ring pass) for little progress:
  // a step's first chunk is at least min_chunk and R, later ones are that or none, unless they
  // finish the prompt.
  const int64_t least = std::max(options_.min_chunk, ring);
  if (first) chunk = std::max(chunk, std::min({remaining, least, tokens_left}));
  if (!first && chunk < remaining && chunk < least) return 0;
  if (chunk < remaining) {
    const int64_t unit = 2 * static_cast<int64_t>(options_.num_ranks);
    chunk -= chunk % unit;
  }
  return chunk;
}

PlannedStep StepScheduler::Next() {
  PlannedStep step;
  step.demotes.swap(pending_demotes_);
  step.spills.swap(pending_spills_);
  step.promotes.swap(pending_promotes_);
  step.drops.swap(pending_drops_);
  step.ends.swap(pending_ends_);
  step.keeps.swap(pending_keeps_);
  for (const auto& [id, j] : jobs_)
    if (j.started && j.prefilled == j.prompt)
      step.entries.push_back({id, PlannedKind::kDecode, j.prompt, 1});
  int64_t tokens_left = options_.max_step_tokens - static_cast<int64_t>(step.entries.size());
  // The bound is per rank: the step's work over all of them is N times it.
  int64_t bound = options_.max_prefill_work > 0 ? options_.max_prefill_work
                                                : std::numeric_limits<int64_t>::max();
  if (step_work_bound_) bound = std::min(bound, std::max<int64_t>(0, *step_work_bound_));
  int64_t work_left = bound < std::numeric_limits<int64_t>::max() / options_.num_ranks
                          ? bound * options_.num_ranks
                          : std::numeric_limits<int64_t>::max();
  bool first = true;
  for (StepJobId id : PrefillOrder()) {
    if (tokens_left <= 0) break;
    Job& j = jobs_[id];
    if (!j.started && (memory_blocked_ || running_ >= options_.max_running ||
                       (!j.taken && reserved_ + j.cost > options_.kv_positions_per_rank)))
      continue;
    const int64_t chunk = ChunkFor(j, tokens_left, work_left, first);
    if (chunk <= 0) continue;
    if (!j.started) {
      j.started = true;
      j.refused = false;
      ++running_;
      if (!j.taken) reserved_ += j.cost;
      step.starts.push_back({.job = id,
                             .capacity_per_rank = j.reservation,
                             .prefix_from = j.cached_from,
                             .prefix_tokens = j.cached,
                             .keep = j.keep,
                             .prefix_take = j.taken,
                             .prefix_share = j.shared > 0});
    }
    step.entries.push_back({id, PlannedKind::kPrefill, j.prefilled, chunk});
    tokens_left -= chunk;
    const double work = ChunkWork(j.prefilled, chunk);
    work_left = work >= static_cast<double>(work_left) ? 0 : work_left - static_cast<int64_t>(work);
    first = false;
  }
  for (auto& [id, j] : jobs_) {
    if (!j.started || j.prefilled == j.prompt) continue;
    j.starved = std::none_of(step.entries.begin(), step.entries.end(),
                             [id = id](const PlannedEntry& e) { return e.job == id; });
  }
  NoteKvWaits();
  return step;
}

void StepScheduler::NoteKvWaits() {
  // After the plan's starts: a job left waiting because this plan's starts took the room waits
  // for KV too. A job held back only by the step's token budget or max_running is not counted.
  for (auto& [id, j] : jobs_) {
    if (!j.started && !j.parked &&
        (memory_blocked_ || (!j.taken && reserved_ + j.cost > options_.kv_positions_per_rank)))
      CountKvWait(j);
  }
}

void StepScheduler::CountKvWait(Job& job) {
  if (job.waited_for_kv) return;
  job.waited_for_kv = true;
  ++jobs_waited_for_kv_;
}

void StepScheduler::Completed(const PlannedStep& step) {
  for (const PlannedEntry& e : step.entries) {
    auto it = jobs_.find(e.job);
    if (it == jobs_.end() || e.kind != PlannedKind::kPrefill) continue;
    it->second.prefilled = e.begin + e.count;
  }
}

Status StepScheduler::StartRefused(StepJobId job) {
  auto it = jobs_.find(job);
  MP_REQUIRE(it != jobs_.end() && it->second.started, "step scheduler: job ", job,
             " was not started");
  // A take-over allocates no KV, and its entry is gone on the workers when it fails.
  if (it->second.taken)
    return FailedPreconditionError("job " + std::to_string(job) +
                                   " could not take its prefix-cache entry over");
  Job& j = it->second;
  j.started = false;
  j.prefilled = j.cached;
  j.refused = true;
  --running_;
  reserved_ -= j.cost;
  if (running_ == 0 && cached_.empty())
    return FailedPreconditionError("the workers cannot hold job " + std::to_string(job) +
                                   "'s KV even with no other job running");
  memory_blocked_ = true;
  CountKvWait(j);
  return OkStatus();
}

}  // namespace millipede
