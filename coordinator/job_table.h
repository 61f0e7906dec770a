// The scheduler's job table: the queued and running jobs, the queue's order, the final status of
// the recently ended jobs, and the batching policy (StepScheduler), kept in step with the table
// as jobs are added and end. Ending a job builds the events its observer gets.
//
// Not thread-safe: the Scheduler calls it under its lock.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "api/job_service.h"
#include "control/messages.h"
#include "coordinator/prefix_cache.h"
#include "coordinator/step_scheduler.h"
#include "coordinator/text_stream.h"
#include "monitoring/service_metrics.h"

namespace millipede {

class JobTable {
 public:
  using Clock = std::chrono::steady_clock;
  // Job events for the observers, delivered in order once the scheduler's lock is released.
  using Deliveries = std::vector<std::function<void()>>;

  struct Job {
    JobId id = 0;
    control::JobDescriptor descriptor;
    std::shared_ptr<JobObserver> observer;
    std::unique_ptr<TextStream> text;
    JobState state = JobState::kQueued;
    Clock::time_point submitted, started, first_token, last_token;
    int64_t prefill_done = 0;
    // The prefill attention's query-key pairs and the causal pairs (StepJobResult), as of its
    // last chunk.
    int64_t prefill_attended_pairs = 0, prefill_causal_pairs = 0;
    std::vector<int32_t> ids;
    // A token whose text is still open (UTF-8 or stop-string prefix) is delivered with the next
    // event, so that the last one can carry the held-back text.
    std::optional<std::pair<SampledToken, std::string>> held_token;
    // Its policy's decode strategy (DecodeStrategyName), for the per-strategy batch sizes.
    const char* decode_strategy = kDecodeStrategies[3];
    bool cancel_requested = false;  // by the client or the drain deadline
    bool stop_matched = false;      // a stop string ended the text; the next plan frees it
    bool stopped_by_id = false;     // the workers ended it at a stop or EOS id
    // The prefix cache: whether the job takes part (looked up, its KV kept when it ends), its
    // key and reuse rule, the entry it starts from (held until it starts) and how many prompt
    // tokens that gives, and which positions each rank has stored (the steps committed).
    bool use_cache = true;
    bool pin = false;  // its entry is pinned when it is kept
    bool keep = false;
    uint64_t cache_key = 0;
    PrefixReuse reuse = PrefixReuse::kAnyLength;
    uint64_t cached_from = 0;
    int64_t cached_tokens = 0;
    bool cache_held = false;  // copies the entry: holds it until it starts
    // ... mapping its blocks (CachedStart::shared_rows): holds it, shared, until it ends.
    bool cache_shares = false;
    bool cache_take = false;  // takes the entry over (it left the cache at lookup)
    // Copies an entry that nothing else wanted but that had no room for it (its job reserved
    // fewer tokens): once the copy is committed the entry is dropped, as a take-over would have
    // taken it, unless something wants it by then; this job's KV holds the same prefix.
    bool cache_drop_source = false;
    RankPositions positions;
    // Where its prompt's prefill steps ended (the lengths a sparse-prefill entry is reusable
    // at), from the cached prefix's own reuse lengths up to where it took over.
    std::vector<int64_t> chunk_ends;
    // Parked (StepScheduler::Park) while an older job, `waits_for`, whose KV will be cached holds
    // a longer prefix of this job's prompt than the cache does: it copies the prefix from that
    // job once its prompt is stored (StartFollowersEarly), or looks the cache up again when that
    // job ends (0: not waiting).
    JobId waits_for = 0;
    // Its cached start copies the stored prompt of running job `cached_from` (released early by
    // the job it waited for), not an entry: held as an entry if that job's KV is kept before
    // this one starts (and that entry dropped once copied, as cache_drop_source says).
    bool copies_running = false;
    // Parked while the workers read its cached start's disk-tier entry back into their host
    // tier (PrefixCache::StartPromotion; 0: not waiting).
    uint64_t waits_for_read = 0;
  };

  // `metrics` may be null; it must outlive the table.
  JobTable(StepScheduler batch, ServiceMetrics* metrics)
      : batch_(std::move(batch)), metrics_(metrics) {}

  // Turns the prefix cache on: jobs that do not opt out are looked up in `cache` when added and
  // leave their KV in it when they end; `default_policy` is the workers' own (for jobs that
  // bring none).
  // `selected_kv_host`: the workers may keep OmniKV's selected layers in their host tier, where
  // a sequence's rows are split between context (host memory) and generated rows (the device):
  // a job takes such an entry over only if its rows fit both parts.
  // `wait_tokens`: a new job whose prompt shares at least that many more tokens with a queued or
  // running job (which keeps its KV) than with the cache waits for that job rather than
  // prefilling the same prefix beside it, and starts by copying it from the running job once its
  // prompt is stored (StartFollowersEarly) or from the entry it leaves; 0: never waits.
  void EnablePrefixCache(PrefixCache cache, AttentionPolicy default_policy, bool selected_kv_host,
                         int64_t wait_tokens);
  const PrefixCache* prefix_cache() const { return cache_ ? &*cache_ : nullptr; }
  // Indexes the disk entries the workers found at start (ReindexDiskEntries; each worker's
  // report) and drops the incomplete ones and those beyond the disk tier's size on the workers;
  // job ids then start above every reported entry's. Returns how many were adopted.
  int64_t AdoptDiskEntries(const std::vector<std::vector<control::CacheEntryFacts>>& reports);
  // The prefix cache's API (JobService::ListCache, PinCacheEntry, DropCacheEntry).
  StatusOr<std::vector<CacheEntryInfo>> ListCache() const;
  Status PinCacheEntry(uint64_t id, bool pinned);
  Status DropCacheEntry(uint64_t id);
  // Before each plan: frees least recently used cache entries for the first job waiting for KV.
  // When nothing runs and that job still does not fit, it gives up its own cached start (so
  // that its entry may go too); if pinned entries still leave no room it fails (into `out`)
  // rather than wait for ever.
  void EvictForWaitingJobs(Deliveries* out);
  // Worker `rank` has read the disk-tier entries `promoted` back into its host tier, and could
  // not read `failed` (WorkerStats): once every rank has read one it is in the host tier and the
  // jobs waiting for it may start from it; one that a rank could not read is dropped and its jobs
  // run uncached.
  void NotePromotions(int rank, std::span<const uint64_t> promoted,
                      std::span<const uint64_t> failed);
  // A step committed: the prefill chunks and decode tokens of `planned` (but those of the jobs
  // in `failed`) are stored on the workers.
  void RecordCommitted(const PlannedStep& planned, const std::vector<JobId>& failed);

  // The batching policy: the step runner plans from it.
  StepScheduler& batch() { return batch_; }
  const StepScheduler& batch() const { return batch_; }

  // Queues `job` (its descriptor filled but for the id, which is assigned here) once the batching
  // policy took it with `kv_cost_per_rank`; its error otherwise.
  StatusOr<JobId> Add(std::shared_ptr<Job> job, int64_t kv_cost_per_rank);
  // The queued and running jobs by id.
  const std::map<JobId, std::shared_ptr<Job>>& jobs() const { return jobs_; }
  // The queued or running job `id`, or null.
  std::shared_ptr<Job> Find(JobId id) const;
  size_t num_queued() const { return queue_.size(); }

  // Marks job `id` for cancelling (the step runner ends it). A job that has already ended
  // (finished, failed or cancelled) is left as it is: Ok, a no-op. NotFound only for an id never
  // issued.
  Status RequestCancel(JobId id);
  // A queued or running job's status, or an ended one's final status (kept for the last
  // kEndedKept ended jobs; NotFound, saying so, for an older one).
  StatusOr<JobStatusInfo> GetStatus(JobId id) const;
  // Whether `id` was given to a job (ids are issued in order from 1).
  bool WasIssued(JobId id) const { return id >= 1 && id < next_id_; }
  // How many ended jobs' final status is kept.
  static constexpr size_t kEndedKept = 1024;

  // A job the plan starts: out of the queue, into prefill, at `now`.
  void Start(Job& job, Clock::time_point now);
  // A job the workers could not start beside the running ones: back to the front of the queue
  // if the batching policy takes it back (true), else false.
  bool Requeue(Job& job);
  // A job whose start from a cache entry failed on the workers (a file that failed its checks,
  // a lost entry): the entry is dropped and the job waits again to run uncached (true); false
  // for a job that did not start from a copied entry.
  bool RetryUncached(Job& job);
  // Ends a job (removing it from the table and the batching policy) with a completion or
  // error. `freed_by_workers`: the workers freed its sequence themselves (a finished or failed
  // job); otherwise the next step frees it.
  void Finish(Job& job, std::optional<Status> error, Deliveries* out, bool freed_by_workers);
  // Fails every job with `error` (worker failure).
  void FailAll(const Status& error, Deliveries* out);
  // Fails the queued jobs with `error` (a drain).
  void FailQueued(const Status& error, Deliveries* out);
  // prefill_progress_ratio: the longest prompt in prefill.
  void ReportPrefillProgress();
  // kv_reserved_positions (the jobs' reservations) and the prefix cache's metrics.
  void ReportKv();

 private:
  JobStatusInfo StatusOf(const Job& job) const;
  // The observer's last events for an ended job; returns the finish reason for the metrics.
  const char* DeliverError(Job& job, const Status& error, JobStatusInfo* info,
                           Deliveries* out) const;
  const char* DeliverCompletion(Job& job, double e2e_s, double decode_tps, bool kept,
                                Deliveries* out) const;
  // Keeps the final status of the last kEndedKept ended jobs.
  void RememberEnded(const JobStatusInfo& info);
  void RemoveFromQueue(JobId id);
  // Whether the job takes part in the prefix cache, its key and reuse rule.
  void PrepareForCache(Job& job) const;
  // The job's hit (held or taken over), once prepared. `others_want`: other jobs start from the
  // same entry now (waiting followers released together), so it is shared rather than taken
  // over where its blocks can be.
  std::optional<CachedStart> LookUp(Job& job, bool others_want = false);
  // The older queued or running job, keeping its KV under the same key, that shares the longest
  // prefix of `job`'s prompt when that is at least wait_tokens_ more than the cache gives it now
  // (the oldest among equals); none otherwise.
  std::optional<JobId> PrefixLeader(const Job& job) const;
  // Job `leader` ended: the jobs parked behind it wait for another leader or look the cache up
  // and wait to start as any job.
  void ReleaseFollowers(JobId leader);
  // Job `leader`'s prompt is stored on the workers: the jobs parked behind it that it serves
  // start now, each copying its share of the prompt from the running job, when all their copies
  // fit the KV budget together (else they wait for its end and its entry).
  void StartFollowersEarly(const Job& leader);
  // What `follower` may copy of running job `leader`'s stored prompt (its reuse rule's longest
  // length within the prompts' common start), with the reuse lengths below it; none when nothing.
  std::optional<CachedStart> CopyFromRunning(const Job& leader, const Job& follower,
                                             std::vector<int64_t>* lengths) const;
  // Job `id` ended (its KV kept or not): the jobs that were to copy from it while it ran but have
  // not started hold its entry, or wait again behind it.
  void RedirectRunningCopies(JobId id);
  // A job gives up the cached start LookUp gave it (held: released; taken: the entry dropped),
  // in the table and in the batching policy.
  void GiveUpCachedStart(Job& job);
  // Releases the job's hold on its entry and its share of it, if any.
  void LetGoOfEntry(Job& job);
  // Drops entry `entry`, which a started job copied (cache_drop_source), unless it is pinned,
  // held or no longer in backend memory.
  void DropCopiedEntry(uint64_t entry);
  // A job whose cached start is on disk waits for the entry to move up to the host tier (the
  // workers read it in the background) where the host tier has room; otherwise its start reads
  // the file.
  void WaitForRead(Job& job);
  // The jobs waiting for entry `entry` to be read back wait to start as any job: from it
  // (`read`), or uncached.
  void ReleaseReaders(uint64_t entry, bool read);
  // Has the batching policy carry out what PrefixCache moved and dropped.
  void ApplyEviction(const PrefixEviction& e);
  // Frees least recently used device-tier entries worth `need` KV positions (all for
  // need < 0), moving them down where a lower tier has room (PrefixCache::Evict); whether any
  // left the workers' KV memory.
  bool Evict(int64_t need);
  // The prefix cache's part of Finish: whether the job's KV stays as an entry (true), and the
  // batching policy told so.
  bool LeaveKv(Job& job, const std::optional<Status>& error, bool started, bool freed_by_workers);

  StepScheduler batch_;
  ServiceMetrics* const metrics_;
  std::optional<PrefixCache> cache_;
  AttentionPolicy default_policy_;
  bool selected_kv_host_ = false;
  int64_t shared_starts_ = 0;  // jobs started sharing an entry's blocks (a metric)
  int64_t wait_tokens_ = 0;
  int64_t prefix_waits_ = 0;                     // jobs parked behind a leader, cumulative
  std::map<uint64_t, std::set<int>> promoting_;  // disk-tier entries read back: the ranks done
  JobId next_id_ = 1;
  std::map<JobId, std::shared_ptr<Job>> jobs_;  // queued and running
  std::deque<JobId> queue_;                     // the queued ones, oldest first
  std::map<JobId, JobStatusInfo> ended_;        // the last kEndedKept ended jobs
  std::deque<JobId> ended_order_;
};

}  // namespace millipede
