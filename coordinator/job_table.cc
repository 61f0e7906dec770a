// The job table: adding, starting, requeueing and ending jobs, and their status.
#include "coordinator/job_table.h"

#include <algorithm>
#include <iostream>

#include "coordinator/disk_entries.h"

namespace millipede {
namespace {

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

void JobTable::EnablePrefixCache(PrefixCache cache, AttentionPolicy default_policy,
                                 bool selected_kv_host, int64_t wait_tokens) {
  cache_.emplace(std::move(cache));
  default_policy_ = std::move(default_policy);
  selected_kv_host_ = selected_kv_host;
  wait_tokens_ = wait_tokens;
}

namespace {

bool HasLayersOf(const AttentionPolicy& policy, DecodeRole role) {
  for (const LayerPolicy& layer : policy.layers)
    if (!layer.MixedDecode() && layer.LayerDecode() == role) return true;
  return false;
}

bool HasSelectedLayers(const AttentionPolicy& policy) {
  return HasLayersOf(policy, DecodeRole::kSelected);
}

// Whether a job of `policy` taking over `hit` fits its rows in the entry's sequence: its
// reservation within the entry's capacity and, where host-tier layers split the rows between
// context (host memory) and generated rows (the device), each part within its own.
bool FitsTakeOver(const PrefixStart& hit, int64_t need, int64_t decode_rows) {
  if (need > hit.capacity) return false;
  if (hit.host_generated_rows < 0) return true;
  return decode_rows <= hit.host_generated_rows &&
         need - decode_rows <= hit.capacity - hit.host_generated_rows;
}

// How many leading tokens `prompt` shares with `other`, counting at most `most` of them.
int64_t SharedPrefix(const std::vector<int32_t>& prompt, const std::vector<int32_t>& other,
                     int64_t most) {
  const auto n = static_cast<size_t>(std::min<int64_t>(most, std::ssize(other)));
  return static_cast<int64_t>(
      std::mismatch(prompt.begin(), prompt.begin() + n, other.begin()).first - prompt.begin());
}

// The job starts from nothing after all (a cached start given up).
void ForgetCachedStart(JobTable::Job& job, int ranks) {
  job.cache_drop_source = false;
  job.copies_running = false;
  job.cached_from = 0;
  job.cached_tokens = 0;
  job.positions = RankPositions(ranks);
  job.chunk_ends.clear();
}

}  // namespace

void JobTable::PrepareForCache(Job& job) const {
  job.keep = cache_.has_value() && job.use_cache;
  job.positions = RankPositions(batch_.num_ranks());
  if (!job.keep) return;
  const AttentionPolicy& policy = job.descriptor.policy ? *job.descriptor.policy : default_policy_;
  job.cache_key = cache_->KeyOf(policy);
  job.reuse = ReuseOf(policy);
}

std::optional<JobId> JobTable::PrefixLeader(const Job& job) const {
  // A window store's entry is reusable at its own length only.
  if (!job.keep || wait_tokens_ <= 0 || job.reuse == PrefixReuse::kOwnLength) return std::nullopt;
  const std::vector<int32_t>& prompt = job.descriptor.prompt_ids;
  // A job prefills at least its prompt's last token.
  const auto most = static_cast<int64_t>(prompt.size()) - 1;
  int64_t best = cache_->Peek(job.cache_key, prompt) + wait_tokens_ - 1;
  std::optional<JobId> leader;
  for (const auto& [id, other] : jobs_) {
    if (job.id != 0 && id >= job.id) break;  // older jobs only: no job waits on itself
    if (!other->keep || other->cancel_requested || other->cache_key != job.cache_key) continue;
    const int64_t shared = SharedPrefix(prompt, other->descriptor.prompt_ids, most);
    if (shared > best) {
      best = shared;
      leader = id;
    }
  }
  return leader;
}

std::optional<CachedStart> JobTable::LookUp(Job& job, bool others_want) {
  if (!job.keep) return std::nullopt;
  const control::JobDescriptor& d = job.descriptor;
  std::optional<PrefixStart> hit = cache_->Lookup(job.cache_key, d.prompt_ids);
  if (!hit) return std::nullopt;
  const int64_t need = StepScheduler::CachedReservationPerRank(
      hit->positions.MaxRows(), hit->tokens, static_cast<int64_t>(d.prompt_ids.size()),
      d.max_new_tokens, batch_.num_ranks());
  // Taken over when nothing else wants it and it has room: no copy, no second reservation. When
  // other jobs wait for it too, those that can share its blocks all start from it at once.
  const bool fits =
      FitsTakeOver(*hit, need, DecodeRowsPerRank(d.max_new_tokens, batch_.num_ranks()));
  const bool share = others_want && hit->shared_rows > 0;
  job.cache_take = hit->exclusive && fits && !share && cache_->Remove(hit->entry).ok();
  job.cache_held = !job.cache_take && cache_->Hold(hit->entry).ok();
  job.cache_drop_source = job.cache_held && hit->exclusive && !fits && !share;
  if (!job.cache_take && !job.cache_held) return std::nullopt;
  // A copy maps the entry's whole blocks unless the entry goes once copied.
  job.cache_shares = job.cache_held && !job.cache_drop_source && hit->shared_rows > 0;
  if (job.cache_shares) cache_->Share(hit->entry);
  job.cached_from = hit->entry;
  job.cached_tokens = hit->tokens;
  job.positions = hit->positions;
  // Rows before the hit are the entry's: so are the lengths they may be reused at.
  job.chunk_ends = hit->reuse_lengths;
  if (job.cache_held && cache_->tier_of(hit->entry) == CacheTier::kDisk) WaitForRead(job);
  return CachedStart{hit->entry,     hit->tokens,   hit->positions.MaxRows(),
                     job.cache_take, hit->capacity, job.cache_shares ? hit->shared_rows : 0};
}

void JobTable::WaitForRead(Job& job) {
  const uint64_t entry = job.cached_from;
  if (promoting_.count(entry) == 0) {
    PrefixEviction moved;
    if (!cache_->StartPromotion(entry, &moved)) return;
    ApplyEviction(moved);
    batch_.PromoteSaved(entry);
    promoting_[entry];
  }
  job.waits_for_read = entry;
}

void JobTable::ReleaseReaders(uint64_t entry, bool read) {
  for (auto& [id, job] : jobs_) {
    if (job->waits_for_read != entry) continue;
    job->waits_for_read = 0;
    if (!read) {
      GiveUpCachedStart(*job);
    }
    (void)batch_.Unpark(id, std::nullopt);
  }
}

void JobTable::NotePromotions(int rank, std::span<const uint64_t> promoted,
                              std::span<const uint64_t> failed) {
  if (!cache_) return;
  // Entries dropped while no job waited for them are not reported by every rank.
  std::erase_if(promoting_, [&](const auto& e) { return !cache_->index().Contains(e.first); });
  for (uint64_t entry : promoted) {
    auto it = promoting_.find(entry);
    if (it == promoting_.end()) continue;
    it->second.insert(rank);
    if (std::ssize(it->second) < batch_.num_ranks()) continue;
    promoting_.erase(it);
    cache_->FinishPromotion(entry);
    ReleaseReaders(entry, /*read=*/true);
  }
  for (uint64_t entry : failed) {
    if (promoting_.erase(entry) == 0) continue;
    std::cerr << "millipede-coordinator: prefix-cache entry " << entry
              << " could not be read back on worker rank " << rank << "; its jobs run uncached\n";
    ReleaseReaders(entry, /*read=*/false);
    // Never used again: a rank lost it (a damaged file, removed there).
    if (cache_->Remove(entry).ok()) batch_.DropSaved(entry);
  }
  ReportKv();
}

void JobTable::LetGoOfEntry(Job& job) {
  if (job.cache_held) cache_->Release(job.cached_from);
  if (job.cache_shares) cache_->Unshare(job.cached_from);
  job.cache_held = job.cache_shares = false;
}

void JobTable::GiveUpCachedStart(Job& job) {
  LetGoOfEntry(job);
  // A take-over's entry left the cache: the workers free it with the next step.
  if (job.cache_take) batch_.DropCached(job.cached_from);
  job.cache_take = false;
  job.waits_for_read = 0;
  ForgetCachedStart(job, batch_.num_ranks());
  // The batching policy's side, where it has one (a job not yet added, or whose cached start it
  // refused, has none).
  batch_.ForgetCachedStart(job.id);
}

void JobTable::DropCopiedEntry(uint64_t entry) {
  const std::optional<PrefixEntryInfo> info = cache_->index().Info(entry);
  if (!info || info->pinned || info->holders > 0 || cache_->tier_of(entry) != CacheTier::kDevice)
    return;
  if (cache_->Remove(entry).ok()) batch_.DropCached(entry);
  ReportKv();
}

void JobTable::ReleaseFollowers(JobId leader) {
  const auto waiting = std::count_if(jobs_.begin(), jobs_.end(),
                                     [&](const auto& j) { return j.second->waits_for == leader; });
  for (auto& [id, job] : jobs_) {
    if (job->waits_for != leader) continue;
    job->waits_for = 0;
    if (const std::optional<JobId> next = PrefixLeader(*job)) {
      job->waits_for = *next;
      continue;
    }
    const std::optional<CachedStart> cached = LookUp(*job, /*others_want=*/waiting > 1);
    if (!batch_.Unpark(id, cached).ok()) {
      // As in Add: a cached start beyond the KV budget runs uncached.
      GiveUpCachedStart(*job);
      (void)batch_.Unpark(id, std::nullopt);
    }
    if (job->waits_for_read != 0) (void)batch_.Park(id);
  }
}

namespace {

// Whether job `job`'s whole prompt is stored on the workers (its last chunk committed).
bool PromptStored(const JobTable::Job& job) {
  return !job.chunk_ends.empty() &&
         job.chunk_ends.back() == static_cast<int64_t>(job.descriptor.prompt_ids.size());
}

}  // namespace

std::optional<CachedStart> JobTable::CopyFromRunning(const Job& leader, const Job& follower,
                                                     std::vector<int64_t>* lengths) const {
  const std::vector<int32_t>& prompt = follower.descriptor.prompt_ids;
  // A job prefills at least its prompt's last token.
  const int64_t shared = SharedPrefix(prompt, leader.descriptor.prompt_ids, std::ssize(prompt) - 1);
  lengths->clear();
  int64_t tokens = shared;
  if (leader.reuse == PrefixReuse::kChunkEnds) {
    // A sparse prefill's KV is reusable where one of its steps ended.
    for (int64_t end : leader.chunk_ends)
      if (end <= shared && (lengths->empty() || end > lengths->back())) lengths->push_back(end);
    tokens = lengths->empty() ? 0 : lengths->back();
  } else if (leader.reuse == PrefixReuse::kOwnLength) {
    tokens = 0;
  }
  if (tokens < 1) return std::nullopt;
  return CachedStart{leader.id, tokens, leader.positions.Before(tokens).MaxRows(), false, 0};
}

void JobTable::StartFollowersEarly(const Job& leader) {
  struct Early {
    std::shared_ptr<Job> job;
    CachedStart start;
    std::vector<int64_t> lengths;
  };
  std::vector<Early> early;
  int64_t cost = 0;
  for (const auto& [id, job] : jobs_) {
    if (job->waits_for != leader.id) continue;
    Early e{job, {}, {}};
    const std::optional<CachedStart> start = CopyFromRunning(leader, *job, &e.lengths);
    if (!start) continue;
    const StatusOr<int64_t> c = batch_.CopyStartCost(id, *start);
    if (!c.ok()) continue;
    cost += *c;
    e.start = *start;
    early.push_back(std::move(e));
  }
  // All or none: a copy that does not fit would wait for memory that the leader's end frees
  // anyway, and its entry would then be copied rather than taken over.
  if (early.empty() || cost > batch_.unreserved_per_rank()) return;
  for (Early& e : early) {
    Job& job = *e.job;
    if (!batch_.Unpark(job.id, e.start).ok()) continue;
    job.waits_for = 0;
    job.copies_running = true;
    job.cached_from = leader.id;
    job.cached_tokens = e.start.tokens;
    job.positions = leader.positions.Before(e.start.tokens);
    job.chunk_ends = std::move(e.lengths);
    cache_->CountReuse(std::ssize(job.descriptor.prompt_ids), e.start.tokens);
  }
  ReportKv();
}

void JobTable::RedirectRunningCopies(JobId id) {
  const bool kept = cache_->index().Contains(id);
  for (auto& [fid, job] : jobs_) {
    if (!job->copies_running || job->cached_from != id || job->state != JobState::kQueued) continue;
    job->copies_running = false;
    if (kept && cache_->Hold(id).ok()) {
      // Its copy holds the same prefix: once the last copy is made the entry goes (as a copy of
      // an entry too small to take over does), unless something else wants it.
      job->cache_held = job->cache_drop_source = true;
      continue;
    }
    // Nothing of it is left to copy: behind it again, so that ReleaseFollowers decides.
    GiveUpCachedStart(*job);
    (void)batch_.Park(fid);
    job->waits_for = id;
  }
}

StatusOr<JobId> JobTable::Add(std::shared_ptr<Job> job, int64_t kv_cost_per_rank) {
  control::JobDescriptor& d = job->descriptor;
  PrepareForCache(*job);
  const std::optional<JobId> leader = PrefixLeader(*job);
  const std::optional<CachedStart> cached = leader ? std::nullopt : LookUp(*job);
  // Admission already held the job to one rank's KV capacity: the policy takes it.
  Status added = batch_.Add(next_id_, static_cast<int64_t>(d.prompt_ids.size()), d.max_new_tokens,
                            kv_cost_per_rank, cached, job->keep);
  if (!added.ok() && (job->cache_held || job->cache_take)) {
    // A copied prefix may lie less evenly over the ranks than the job's own prompt would: when
    // that is what makes it too large for the KV budget, the job runs uncached.
    GiveUpCachedStart(*job);
    added = batch_.Add(next_id_, static_cast<int64_t>(d.prompt_ids.size()), d.max_new_tokens,
                       kv_cost_per_rank, std::nullopt, job->keep);
  }
  MP_RETURN_IF_ERROR(added);
  if (leader) {
    job->waits_for = *leader;
    ++prefix_waits_;
  }
  if (leader || job->waits_for_read != 0) (void)batch_.Park(next_id_);
  job->id = next_id_++;
  d.job_id = job->id;
  jobs_[job->id] = job;
  // A leader whose prompt is stored already may let it start now.
  if (leader && PromptStored(*jobs_.at(*leader))) StartFollowersEarly(*jobs_.at(*leader));
  queue_.push_back(job->id);
  if (metrics_) metrics_->JobQueued();
  return job->id;
}

std::shared_ptr<JobTable::Job> JobTable::Find(JobId id) const {
  auto it = jobs_.find(id);
  return it != jobs_.end() ? it->second : nullptr;
}

Status JobTable::RequestCancel(JobId id) {
  auto it = jobs_.find(id);
  if (it != jobs_.end()) {
    it->second->cancel_requested = true;
    return OkStatus();
  }
  // Ids are issued in order from 1 and a job leaves jobs_ only when it ends: an issued id that is
  // not there has ended, and cancelling it is a no-op (a client may race its own job's end).
  if (WasIssued(id)) return OkStatus();
  return NotFoundError("no job " + std::to_string(id));
}

JobStatusInfo JobTable::StatusOf(const Job& job) const {
  JobStatusInfo info;
  info.id = job.id;
  info.state = job.state;
  info.prompt_tokens = static_cast<int64_t>(job.descriptor.prompt_ids.size());
  info.prefill_done = job.prefill_done;
  info.generated_tokens = static_cast<int64_t>(job.ids.size());
  if (job.state == JobState::kQueued) {
    for (JobId q : queue_) {
      if (q == job.id) break;
      ++info.queue_position;
    }
  }
  return info;
}

StatusOr<JobStatusInfo> JobTable::GetStatus(JobId id) const {
  auto it = jobs_.find(id);
  if (it != jobs_.end()) return StatusOf(*it->second);
  auto ended = ended_.find(id);
  if (ended != ended_.end()) return ended->second;
  if (WasIssued(id))
    return NotFoundError("job " + std::to_string(id) +
                         " ended; the final status of only the last " + std::to_string(kEndedKept) +
                         " ended jobs is kept");
  return NotFoundError("no job " + std::to_string(id));
}

void JobTable::RemoveFromQueue(JobId id) {
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    if (*it == id) {
      queue_.erase(it);
      break;
    }
  }
}

void JobTable::Start(Job& job, Clock::time_point now) {
  job.copies_running = false;  // its start copies the running job's rows now
  // The plan restores the prefix before anything later may drop the entry; a job that maps the
  // entry's blocks holds it until it ends (one the batching policy counts as taking the whole KV
  // budget copies it).
  if (job.cache_shares && !batch_.shares_blocks(job.id)) {
    cache_->Unshare(job.cached_from);
    job.cache_shares = false;
  }
  if (!job.cache_shares) LetGoOfEntry(job);
  if (job.cache_shares) ++shared_starts_;
  job.state = JobState::kPrefill;
  job.started = now;
  RemoveFromQueue(job.id);
  if (metrics_) metrics_->JobStarted(Seconds(now - job.submitted));
}

void JobTable::ApplyEviction(const PrefixEviction& e) {
  // In the order the workers run them: demotes, spills, drops.
  for (uint64_t id : e.demoted) batch_.DemoteCached(id);
  for (uint64_t id : e.spilled) batch_.SpillCached(id);
  for (uint64_t id : e.dropped_device) batch_.DropCached(id);
  for (const auto* list : {&e.dropped_host, &e.dropped_disk})
    for (uint64_t id : *list) batch_.DropSaved(id);
}

bool JobTable::Evict(int64_t need) {
  const PrefixEviction e = cache_->Evict(need);
  bool freed = !e.demoted.empty() || !e.dropped_device.empty();
  for (uint64_t id : e.spilled) freed = freed || batch_.cached_reservation(id) > 0;
  ApplyEviction(e);
  ReportKv();
  return freed;
}

void JobTable::ReportKv() {
  if (metrics_ == nullptr) return;
  metrics_->KvReserved(batch_.reserved_per_rank() - batch_.cached_per_rank());
  if (!cache_) return;
  const PrefixCacheStats c = cache_->stats();
  metrics_->PrefixCache({.hit_tokens = c.hit_tokens,
                         .miss_tokens = c.miss_tokens,
                         .entries = c.entries,
                         .reserved_positions = batch_.cached_per_rank(),
                         .evictions = c.evictions,
                         .host_entries = c.host_entries,
                         .demotions = c.demotions,
                         .host_hits = c.host_hits,
                         .disk_entries = c.disk_entries,
                         .spills = c.spills,
                         .disk_hits = c.disk_hits,
                         .prefix_waits = prefix_waits_,
                         .promotions = c.promotions,
                         .shared_starts = shared_starts_});
}

void JobTable::EvictForWaitingJobs(Deliveries* out) {
  if (!cache_ || batch_.KvShortfall() == 0) return;
  Evict(batch_.KvShortfall());
  if (batch_.running() > 0 || batch_.KvShortfall() <= 0) return;
  // Nothing runs to free room: the entries still in the way are pinned or held by waiting jobs.
  const std::optional<StepJobId> next = batch_.NextWaiting();
  std::shared_ptr<Job> job = next ? Find(*next) : nullptr;
  if (job == nullptr) return;
  if (job->cache_held || job->cache_take) {
    GiveUpCachedStart(*job);
    Evict(batch_.KvShortfall());
  }
  if (batch_.KvShortfall() <= 0) return;
  if (metrics_) metrics_->RequestError("too_long");
  const std::string why =
      "job " + std::to_string(job->id) + " needs " + std::to_string(batch_.kv_cost(job->id)) +
      " KV positions per rank but prefix-cache entries that are pinned or about to be used hold " +
      std::to_string(batch_.cached_per_rank()) +
      " of the workers' budget; unpin or drop some (millipede cache list)";
  Finish(*job, ResourceExhaustedError(why), out, /*freed_by_workers=*/true);
}

void JobTable::RecordCommitted(const PlannedStep& planned, const std::vector<JobId>& failed) {
  for (const PlannedEntry& e : planned.entries) {
    if (std::find(failed.begin(), failed.end(), e.job) != failed.end()) continue;
    std::shared_ptr<Job> job = Find(e.job);
    if (job == nullptr) continue;
    if (job->cache_drop_source) {
      // Its copy of the entry is on the workers now.
      job->cache_drop_source = false;
      DropCopiedEntry(job->cached_from);
    }
    if (e.kind == PlannedKind::kPrefill) {
      job->positions.AddChunk(e.begin, e.count);
      job->chunk_ends.push_back(e.begin + e.count);
      if (cache_ && job->keep && PromptStored(*job)) StartFollowersEarly(*job);
    } else if (!job->ids.empty()) {
      // The token run is the last one sampled.
      job->positions.AddDecode(static_cast<int64_t>(job->descriptor.prompt_ids.size() +
                                                    job->ids.size()) - 1);
    }
  }
}

bool JobTable::Requeue(Job& job) {
  // A take-over allocates no KV; its failure freed the entry on the workers.
  if (job.cache_take) return false;
  // The workers need the memory more than the cache does.
  const bool freed = cache_ && Evict(-1);
  // Nothing else holds KV and nothing more can be freed: waiting would not help.
  if (!freed && batch_.running() <= 1) return false;
  if (!batch_.StartRefused(job.id).ok()) return false;
  job.state = JobState::kQueued;
  // A copy of a running job's prompt waits on it again (RedirectRunningCopies when it ends).
  job.copies_running = job.cached_from != 0 && !job.cache_held && Find(job.cached_from) != nullptr;
  queue_.push_front(job.id);
  if (metrics_) metrics_->JobRequeued();
  return true;
}

bool JobTable::RetryUncached(Job& job) {
  if (!cache_ || job.cached_from == 0 || job.cache_take) return false;
  const uint64_t entry = job.cached_from;
  LetGoOfEntry(job);
  if (!batch_.RestartUncached(job.id).ok()) return false;
  // Never used again: its KV could not be restored.
  const CacheTier tier = cache_->tier_of(entry);
  if (cache_->Remove(entry).ok()) {
    if (tier == CacheTier::kDevice)
      batch_.DropCached(entry);
    else
      batch_.DropSaved(entry);
  }
  ForgetCachedStart(job, batch_.num_ranks());
  job.state = JobState::kQueued;
  queue_.push_front(job.id);
  if (metrics_) metrics_->JobRequeued();
  ReportKv();
  return true;
}

int64_t JobTable::AdoptDiskEntries(
    const std::vector<std::vector<control::CacheEntryFacts>>& reports) {
  if (!cache_) return 0;
  const DiskReindex found = ReindexDiskEntries(reports, &*cache_);
  for (uint64_t id : found.drop) batch_.DropSaved(id);
  for (uint64_t id : cache_->TrimDisk()) batch_.DropSaved(id);
  next_id_ = std::max<JobId>(next_id_, found.max_id + 1);
  ReportKv();
  return found.adopted;
}

const char* JobTable::DeliverError(Job& job, const Status& error, JobStatusInfo* info,
                                   Deliveries* out) const {
  const char* reason = "error";
  if (error.code() == StatusCode::kCancelled) {
    info->state = JobState::kCancelled;
    reason = "cancelled";
  } else {
    info->state = JobState::kFailed;
    info->error = error.ToString();
  }
  std::shared_ptr<JobObserver> observer = job.observer;
  if (job.held_token) {
    auto [token, delta] = *job.held_token;
    out->push_back([observer, token, delta] { observer->OnToken(token, delta); });
  }
  out->push_back([observer, e = error] { observer->OnError(e); });
  return reason;
}

const char* JobTable::DeliverCompletion(Job& job, double e2e_s, double decode_tps, bool kept,
                                        Deliveries* out) const {
  std::shared_ptr<JobObserver> observer = job.observer;
  JobCompletion c;
  std::string rest = job.text->Finish();
  c.finish_reason =
      job.stop_matched || job.text->stopped() || job.stopped_by_id ? "stop" : "length";
  if (job.held_token) {
    auto [token, delta] = *job.held_token;
    out->push_back([observer, token, d = delta + rest] { observer->OnToken(token, d); });
  }
  c.ids = job.ids;
  c.text = job.text->text();
  c.prompt_tokens = static_cast<int64_t>(job.descriptor.prompt_ids.size());
  c.queue_s = Seconds(job.started - job.submitted);
  c.ttft_s = Seconds(job.first_token - job.submitted);
  c.e2e_s = e2e_s;
  const double prefill_s = Seconds(job.first_token - job.started);
  c.prefill_tokens_per_s = prefill_s > 0 ? c.prompt_tokens / prefill_s : 0;
  c.decode_tokens_per_s = decode_tps;
  c.prefill_attended_pairs = job.prefill_attended_pairs;
  c.prefill_causal_pairs = job.prefill_causal_pairs;
  c.cached_tokens = job.cached_tokens;
  c.cache_entry = kept ? job.id : 0;
  const char* reason = c.finish_reason == "stop" ? "stop" : "length";
  out->push_back([observer, c] { observer->OnComplete(c); });
  return reason;
}

void JobTable::RememberEnded(const JobStatusInfo& info) {
  ended_[info.id] = info;
  ended_order_.push_back(info.id);
  while (ended_order_.size() > kEndedKept) {
    ended_.erase(ended_order_.front());
    ended_order_.pop_front();
  }
}

void JobTable::Finish(Job& job, std::optional<Status> error, Deliveries* out,
                      bool freed_by_workers) {
  const auto now = Clock::now();
  const bool started = job.state != JobState::kQueued;
  const double e2e = Seconds(now - job.submitted);
  JobStatusInfo info = StatusOf(job);
  info.queue_position = 0;
  double decode_tps = 0;
  if (job.ids.size() > 1 && job.last_token > job.first_token)
    decode_tps =
        static_cast<double>(job.ids.size() - 1) / Seconds(job.last_token - job.first_token);
  const JobId id = job.id;
  const bool kept = LeaveKv(job, error, started, freed_by_workers);
  const char* reason;
  if (error) {
    reason = DeliverError(job, *error, &info, out);
  } else {
    info.state = JobState::kFinished;
    reason = DeliverCompletion(job, e2e, decode_tps, kept, out);
  }
  job.held_token.reset();
  if (metrics_) metrics_->JobFinished(reason, started, e2e, decode_tps);
  RememberEnded(info);
  ReportKv();
  RemoveFromQueue(id);
  jobs_.erase(id);  // `job` may be gone from here on
  if (cache_) {
    // Its entry (if kept) is there to start from.
    RedirectRunningCopies(id);
    ReleaseFollowers(id);
  }
  if (started) ReportPrefillProgress();  // 0 once no prompt is in prefill
}

bool JobTable::LeaveKv(Job& job, const std::optional<Status>& error, bool started,
                       bool freed_by_workers) {
  const bool shared = job.cache_shares;
  LetGoOfEntry(job);
  const bool ended_well = !error || error->code() == StatusCode::kCancelled;
  // The workers keep a job they end themselves when it started with keep, unless it failed.
  const bool workers_kept = job.keep && freed_by_workers && ended_well && started;
  bool kept = false;
  // A job that shared an entry's blocks is not kept: its prefix is that entry's, and an entry of
  // its own would count the shared blocks again.
  if (job.keep && started && ended_well && !shared && batch_.holds_kv(job.id)) {
    const auto prompt = static_cast<int64_t>(job.descriptor.prompt_ids.size());
    const int64_t stored = job.positions.total();
    const int64_t run = std::max<int64_t>(0, stored - prompt);
    const AttentionPolicy& policy = job.descriptor.policy ? *job.descriptor.policy
                                                          : default_policy_;
    EndedKv ended{.job = job.id,
                  .key = job.cache_key,
                  .reuse = job.reuse,
                  .prompt = job.descriptor.prompt_ids,
                  .generated = std::span<const int32_t>(job.ids).first(
                      static_cast<size_t>(std::min<int64_t>(run, job.ids.size()))),
                  .chunk_ends = job.chunk_ends,
                  .positions = job.positions,
                  .cost_per_rank = batch_.kept_cost(job.id),
                  .capacity_per_rank = batch_.reservation(job.id),
                  .host_generated_rows =
                      selected_kv_host_ && HasSelectedLayers(policy)
                          ? DecodeRowsPerRank(job.descriptor.max_new_tokens, batch_.num_ranks())
                          : -1};
    kept = stored > 0 && cache_->Insert(ended);
    if (kept && job.pin) (void)cache_->Pin(job.id, true);
  }
  if (kept || workers_kept) {
    batch_.Remove(job.id, freed_by_workers, /*keep=*/true);
    if (!kept) batch_.DropCached(job.id);
  } else {
    batch_.Remove(job.id, freed_by_workers);
  }
  return kept;
}

StatusOr<std::vector<CacheEntryInfo>> JobTable::ListCache() const {
  if (!cache_) return UnimplementedError("the prefix cache is off (--prefix-block-tokens 0)");
  std::vector<CacheEntryInfo> out;
  for (const PrefixEntryInfo& e : cache_->index().List())
    out.push_back({.id = e.id,
                   .tokens = e.tokens,
                   .kv_positions = e.cost_per_rank,
                   .pinned = e.pinned,
                   .hits = e.hits,
                   .holders = e.holders,
                   .tier = CacheTierName(cache_->tier_of(e.id))});
  return out;
}

Status JobTable::PinCacheEntry(uint64_t id, bool pinned) {
  if (!cache_) return UnimplementedError("the prefix cache is off (--prefix-block-tokens 0)");
  return cache_->Pin(id, pinned);
}

Status JobTable::DropCacheEntry(uint64_t id) {
  if (!cache_) return UnimplementedError("the prefix cache is off (--prefix-block-tokens 0)");
  const CacheTier tier = cache_->tier_of(id);
  MP_RETURN_IF_ERROR(cache_->Remove(id));
  if (tier == CacheTier::kDevice)
    batch_.DropCached(id);
  else
    batch_.DropSaved(id);
  ReportKv();
  return OkStatus();
}

void JobTable::FailAll(const Status& error, Deliveries* out) {
  std::vector<std::shared_ptr<Job>> all;
  for (auto& [id, job] : jobs_) all.push_back(job);
  for (auto& job : all) {
    if (metrics_) metrics_->RequestError(job->state == JobState::kQueued ? "internal" : "worker");
    Finish(*job, error, out, /*freed_by_workers=*/true);
  }
}

void JobTable::FailQueued(const Status& error, Deliveries* out) {
  std::vector<std::shared_ptr<Job>> waiting;
  for (JobId id : queue_) waiting.push_back(jobs_[id]);
  for (auto& job : waiting) Finish(*job, error, out, /*freed_by_workers=*/true);
}

void JobTable::ReportPrefillProgress() {
  if (metrics_ == nullptr) return;
  int64_t longest = 0;
  double ratio = 0;
  for (const auto& [id, job] : jobs_) {
    const auto prompt = static_cast<int64_t>(job->descriptor.prompt_ids.size());
    if (job->state != JobState::kPrefill || prompt <= longest) continue;
    longest = prompt;
    ratio = static_cast<double>(job->prefill_done) / static_cast<double>(prompt);
  }
  metrics_->PrefillProgress(ratio);
}

}  // namespace millipede
