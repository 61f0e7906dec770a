// The batching policy of the service, as pure code (no MPI, no threads, no clock): which jobs
// hold KV on the workers, and what each engine step runs — a decode token of every job that is
// decoding plus, within a per-step token budget, prefill chunks of jobs still prefilling or
// waiting (continuous batching with chunked prefill). The coordinator's Scheduler asks it for
// each step's plan, sends the plan to the workers and reports back how the step went.
//
// KV policy: a job's whole KV (its prompt and every token it may generate, on the busiest rank)
// is reserved when it starts, so a running job never runs out of memory mid-way and nothing is
// preempted. A job waits until its reservation fits beside the running jobs'; the workers' memory
// plan has the last word (a start they refuse for memory puts the job back at the head of the
// queue until a running job ends; with nothing running it fails).
//
// Prefill order: each step the budget left after the decode tokens goes to prefill candidates —
// jobs partly prefilled, then waiting ones — fewest remaining prompt tokens first (a short job's
// first token comes quickly while a long prompt prefills), except that a partly prefilled job
// that got nothing in the previous step goes first (a long prompt is never starved: it gets at
// least every other step). A chunk other than a step's first is at least min_chunk tokens or
// finishes its prompt. A chunk is cut to the budget, to the attention work bound (chunk x
// keys it attends to, so a chunk deep into a long prompt is shorter), and to a multiple of 2N
// tokens (N ranks) unless it finishes the prompt, so each rank's share of the prompt equals its
// share of the whole prompt sharded at once (zig-zag).
//
// Over N > 1 ranks ring attention passes every position before and in a chunk around the ring,
// whatever the chunk's size, and the pass is hidden only behind enough attention: a chunk of c
// positions after D costs (D + c) x max(c, R) pairs, R = (N - 1) x ring_pairs_per_row, and no
// chunk is cut below R positions (a shorter one takes as long for less progress).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "common/status.h"

namespace millipede {

using StepJobId = uint64_t;

struct StepSchedulerOptions {
  int num_ranks = 1;
  // Tokens one step adds over all ranks: decode tokens plus prefill chunks.
  int64_t max_step_tokens = 2048;
  // Jobs holding KV at once (at most max_step_tokens: every decoding job runs each step).
  int64_t max_running = 64;
  // KV positions the busiest rank may hold for every running job together (positions of dense
  // KV: a job whose policy keeps less counts less, Add's kv_cost_per_rank).
  int64_t kv_positions_per_rank = 0;
  // Attention work of a step's prefill chunks per rank: the sum over chunks of chunk x (chunk +
  // the positions before it), in token pairs, divided by the ranks (each computes about its
  // share), so one figure gives steps of about the same time on any number of ranks; 0: no
  // bound. The first chunk of a step gets at least min_chunk tokens whatever this says, so every
  // prompt progresses.
  int64_t max_prefill_work = 0;
  int64_t min_chunk = 256;
  // With several ranks: the query-key pairs one rank's attention computes in the time it
  // receives one position's K/V of a layer over the ring (the ratio of the two rates); 0: the
  // ring is not counted. About 830 for llama3-8b in bf16 (4 KiB per row and layer, 16 KFLOP per
  // pair) at 150 GB/s per link beside 500 TFLOP/s of attention (docs/operations.md).
  int64_t ring_pairs_per_row = 0;
};

enum class PlannedKind { kPrefill, kDecode };

// One entry of a step: a prefill chunk [begin, begin + count) of the job's prompt, or a decode
// token.
struct PlannedEntry {
  StepJobId job = 0;
  PlannedKind kind = PlannedKind::kDecode;
  int64_t begin = 0;
  int64_t count = 1;
  bool operator==(const PlannedEntry&) const = default;
};

struct PlannedStart {
  StepJobId job = 0;
  // KV positions to reserve on each rank (the busiest rank's share of prompt + generated).
  int64_t capacity_per_rank = 0;
  // From the prefix cache: positions [0, prefix_tokens) restored from entry prefix_from (0:
  // none); keep: the workers keep the job's KV as an entry when they end it.
  uint64_t prefix_from = 0;
  int64_t prefix_tokens = 0;
  bool keep = false;
  bool prefix_take = false;  // the entry itself becomes the job's (CachedStart::take)
  bool prefix_share = false;  // a copy mapping the entry's whole blocks (CachedStart::shared_rows)
};

// A job's start from the prefix cache (StepScheduler::Add).
struct CachedStart {
  uint64_t entry = 0;
  int64_t tokens = 0;       // positions restored
  int64_t prefix_rows = 0;  // of them, on the rank holding the most
  // The job takes the entry over: the entry's reservation (its KV cost and `capacity` positions
  // per rank) becomes the job's from now on, and nothing more is reserved.
  bool take = false;
  int64_t capacity = 0;
  // A copy whose first shared_rows positions per rank (on the rank sharing the fewest) map the
  // entry's memory (the prefix cache's shared blocks): they count against the budget as the
  // entry's, not the job's, while it runs; kept at its end, the job counts them again.
  int64_t shared_rows = 0;
};

// One step for the workers: move the cache entries `demotes` to host memory and `spills` to
// disk, free the cache entries `drops` and the jobs `ends`, start reading the disk-tier entries
// `promotes` into host memory (in the background), keep the jobs `keeps` as cache entries, start
// `starts` (in order), then run `entries`.
struct PlannedStep {
  std::vector<StepJobId> ends;
  std::vector<PlannedStart> starts;
  std::vector<PlannedEntry> entries;
  std::vector<uint64_t> drops;
  std::vector<StepJobId> keeps;
  std::vector<uint64_t> demotes;
  std::vector<uint64_t> spills;
  std::vector<uint64_t> promotes;
  bool empty() const {
    return drops.empty() && ends.empty() && keeps.empty() && starts.empty() && entries.empty() &&
           demotes.empty() && spills.empty() && promotes.empty();
  }
  int64_t decode_tokens() const;
  int64_t prefill_tokens() const;
};

class StepScheduler {
 public:
  // InvalidArgument for options that cannot work (no ranks, budgets below 1, max_running over
  // max_step_tokens).
  static StatusOr<StepScheduler> Create(const StepSchedulerOptions& options);

  // A job joins the queue. InvalidArgument for a duplicate id or sizes below 1, OutOfRange when
  // its reservation alone exceeds kv_positions_per_rank (it could never start).
  // `kv_cost_per_rank`: what the job's KV takes on the busiest rank, in positions of dense KV,
  // counted against kv_positions_per_rank (0: its reservation, as dense KV; an attention policy
  // whose streaming heads keep only a window costs less, AdmittedJob::kv_cost_per_rank).
  // `cached`: the job starts from a prefix-cache entry and prefills from cached->tokens; its
  // reservation is the prefix's rows plus the rest's. `keep`: the workers keep its KV when they
  // end it (PlannedStart::keep).
  Status Add(StepJobId job, int64_t prompt_tokens, int64_t max_new_tokens,
             int64_t kv_cost_per_rank = 0, const std::optional<CachedStart>& cached = std::nullopt,
             bool keep = false);
  // The job leaves (finished, cancelled, failed). Its reservation is released; if it held KV
  // and the workers did not free it themselves, the next step frees it (PlannedStep::ends).
  // With `keep` (a job that held KV) its reservation stays, as prefix-cache entry `job`, and if
  // the workers did not keep it themselves the next step does (PlannedStep::keeps).
  // Unknown ids are ignored.
  void Remove(StepJobId job, bool freed_by_workers, bool keep = false);
  // Frees prefix-cache entry `entry` (a job kept with Remove): its reservation is released and
  // the next step drops it on the workers (PlannedStep::drops). Unknown ids are ignored.
  void DropCached(uint64_t entry);
  // Moves prefix-cache entry `entry` to the host tier: its reservation is released and the next
  // step demotes it on the workers (PlannedStep::demotes). Unknown ids are ignored.
  void DemoteCached(uint64_t entry);
  // Moves prefix-cache entry `entry` (from backend memory, releasing its reservation, or from
  // the host tier) to the disk tier: the next step spills it (PlannedStep::spills).
  void SpillCached(uint64_t entry);
  // Frees a host-tier or disk-tier entry (which reserves nothing here): the next step drops it.
  void DropSaved(uint64_t entry);
  // Moves disk-tier entry `entry` up to the host tier (which reserves nothing here): the next
  // step has the workers start reading it (PlannedStep::promotes).
  void PromoteSaved(uint64_t entry);
  // A started job whose cached start failed on the workers (its entry could not be restored)
  // waits again to run uncached: its reservation is released and recomputed without the
  // prefix. FailedPrecondition for a job not started or taken over.
  Status RestartUncached(StepJobId job);
  // KV positions per rank the prefix-cache entries reserve.
  int64_t cached_per_rank() const { return cached_cost_; }
  // What entry `entry` reserves (0: none, or not in backend memory).
  int64_t cached_reservation(uint64_t entry) const {
    auto it = cached_.find(entry);
    return it == cached_.end() ? 0 : it->second;
  }
  // What the first job waiting for KV lacks, in KV positions per rank, beyond what is not
  // reserved (every reservation counted, cache entries too); 0 when no job waits for KV. After a
  // start the workers refused for memory: -1 (free what can be freed).
  int64_t KvShortfall() const;
  // The job KvShortfall speaks of (the first waiting job in prefill order), if any.
  std::optional<StepJobId> NextWaiting() const;
  // A waiting job gives up its start from the prefix cache: it prefills its whole prompt and
  // reserves as an uncached job.
  void ForgetCachedStart(StepJobId job);
  // A waiting job is parked: it takes no part in the plans (it neither starts nor counts as
  // waiting for KV) until Unpark. The job table parks a job that waits for another job's prefix
  // to be cached, or for its cached start to be read back from disk. InvalidArgument for a job
  // started or unknown.
  Status Park(StepJobId job);
  // A parked job waits again as any job, from `cached` when given (as Add's; a job that has a
  // cached start keeps it and may not be given another). On an error (a cached start that does
  // not fit the KV budget, a take-over of an entry not cached) it stays parked and nothing
  // changes.
  Status Unpark(StepJobId job, const std::optional<CachedStart>& cached);
  bool parked(StepJobId job) const;
  // What waiting job `job` would count against the KV budget with the copied cached start
  // `cached` (not a take-over); InvalidArgument for a job started or unknown, or a start that
  // does not leave a token to prefill.
  StatusOr<int64_t> CopyStartCost(StepJobId job, const CachedStart& cached) const;
  // KV positions per rank no job or device-tier entry reserves.
  int64_t unreserved_per_rank() const { return options_.kv_positions_per_rank - reserved_; }

  // The next step (empty when there is nothing to do). Jobs it starts hold their reservation
  // from here on. After a step that ran, call Completed before the next Next().
  PlannedStep Next();
  // A bound on the next plans' prefill work per rank besides max_prefill_work (the lower one
  // holds), as an inter-token latency target sets it (step_time_model.h); nullopt: none. The
  // first chunk of a step still gets at least min_chunk tokens, so every prompt progresses.
  void SetStepWorkBound(std::optional<int64_t> work_per_rank) { step_work_bound_ = work_per_rank; }
  // Jobs that decode in the next step (every started job whose prompt is prefilled).
  int64_t decoding() const;
  // A planned step's prefill attention work per rank, as the bounds count it.
  double StepWork(const PlannedStep& step) const;
  // The step ran: its prefill chunks are committed; a job whose last chunk ran decodes from the
  // next step on.
  void Completed(const PlannedStep& step);
  // A step stopped before it committed anything (a cancel inside it) is not reported: the next
  // Next() plans the same work again (the jobs it started stay started).
  // The workers refused to start `job` for memory: it goes back to the head of the queue and no
  // job starts until a running one leaves. FailedPrecondition (the caller fails the job) when no
  // other job or cache entry holds KV, so waiting would not help, or for a take-over.
  Status StartRefused(StepJobId job);

  int64_t running() const { return running_; }
  int num_ranks() const { return options_.num_ranks; }
  int64_t waiting() const { return static_cast<int64_t>(jobs_.size()) - running_; }
  int64_t reserved_per_rank() const { return reserved_; }
  // Jobs that have had to wait for KV to be freed, each counted once, since the start: a
  // waiting job that a plan (Next) could not start because the running jobs' reservations left
  // no room for its own, or because the workers refused a start for memory (StartRefused) and
  // no job has ended since. Monotonic: the metric kv_admission_waits_total follows it.
  int64_t jobs_waited_for_kv() const { return jobs_waited_for_kv_; }
  bool holds_kv(StepJobId job) const;
  // What a job counts against the KV budget, and the positions per rank its sequence has room
  // for (0 for an unknown id).
  int64_t kv_cost(StepJobId job) const;
  // What the job's KV counts once kept as an entry: its cost with the blocks it shares.
  int64_t kept_cost(StepJobId job) const;
  // Whether the job starts mapping its entry's blocks (PlannedStart::prefix_share).
  bool shares_blocks(StepJobId job) const;
  int64_t reservation(StepJobId job) const;
  // KV positions one job reserves on the busiest rank.
  static int64_t ReservationPerRank(int64_t prompt_tokens, int64_t max_new_tokens, int num_ranks);
  // The same for a job that starts from a cached prefix of `cached_tokens` positions, of which
  // the busiest rank holds `prefix_rows`: those, then the rest of the prompt sharded as any
  // prompt, then its decode share.
  static int64_t CachedReservationPerRank(int64_t prefix_rows, int64_t cached_tokens,
                                          int64_t prompt_tokens, int64_t max_new_tokens,
                                          int num_ranks);

 private:
  // Releases a device-tier entry's reservation and forgets it; false when it has none.
  bool ReleaseCached(uint64_t entry);
  struct Job;
  // Gives `j` (job `id`, not started, no cached start) the start `cached`: its reservation,
  // cost and prefilled prompt; a take-over moves the entry's reservation to it. On an error
  // nothing changes.
  Status StartFromCache(StepJobId id, const CachedStart& cached, Job* j);
  // The cost StartFromCache gives `j` for a copied start of `cached`'s reservation, before the
  // shared blocks' part (SharedCost) is taken off.
  int64_t CopyCost(const Job& j, const CachedStart& cached) const;
  int64_t SharedCost(const Job& j, const CachedStart& cached) const;
  struct Job {
    int64_t prompt = 0, max_new = 0, reservation = 0;
    int64_t cached = 0;          // positions restored from the prefix cache
    uint64_t cached_from = 0;    // the entry (0: none)
    bool keep = false;
    bool taken = false;          // took its entry over: its cost is reserved already
    int64_t shared = 0;          // of its KV, what its entry's shared blocks count (not in cost)
    int64_t cost = 0;       // its KV in positions of dense KV: what reserved_ counts
    int64_t prefilled = 0;  // committed prompt tokens
    uint64_t arrival = 0;
    bool started = false;
    bool starved = false;        // partly prefilled and left out of the last step
    bool refused = false;        // the workers refused its start for memory
    bool waited_for_kv = false;  // counted in jobs_waited_for_kv_
    bool parked = false;         // Park: no part in the plans until Unpark
  };
  explicit StepScheduler(const StepSchedulerOptions& options) : options_(options) {}
  // Prefill candidates in the order the budget goes to them.
  std::vector<StepJobId> PrefillOrder() const;
  // The chunk `job` gets with `tokens_left` and `work_left` (0: none fits).
  int64_t ChunkFor(const Job& job, int64_t tokens_left, int64_t work_left, bool first) const;
  // Counts the waiting jobs that the KV left now cannot start (once per job).
  void NoteKvWaits();
  // Counts `job` in jobs_waited_for_kv_ unless it was counted before.
  void CountKvWait(Job& job);
  // R: the chunk whose attention hides its ring pass (0 on one rank or when not counted).
  int64_t RingChunk() const;
  // The work of a chunk of `chunk` positions after `before`: (before + chunk) x max(chunk, R).
  double ChunkWork(int64_t before, int64_t chunk) const;

  StepSchedulerOptions options_;
  std::map<StepJobId, Job> jobs_;
  std::vector<StepJobId> pending_ends_;
  std::vector<StepJobId> pending_keeps_;
  std::vector<uint64_t> pending_drops_;
  std::vector<uint64_t> pending_demotes_;
  std::vector<uint64_t> pending_spills_;
  std::vector<uint64_t> pending_promotes_;
  std::map<uint64_t, int64_t> cached_;  // prefix-cache entries' reservations
  int64_t cached_cost_ = 0;
  int64_t running_ = 0;
  int64_t reserved_ = 0;
  uint64_t arrivals_ = 0;
  bool memory_blocked_ = false;
  int64_t jobs_waited_for_kv_ = 0;
  std::optional<int64_t> step_work_bound_;  // SetStepWorkBound
};

}  // namespace millipede
