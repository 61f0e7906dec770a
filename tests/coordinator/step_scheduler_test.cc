// StepScheduler: continuous batching with chunked prefill, KV reservations, the prefill order
// (short jobs first, no starvation), the attention work bound and the ring pass it counts over
// several ranks, and a random load run to the end with its invariants checked at every step.
#include "coordinator/step_scheduler.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

namespace millipede {
namespace {

StepScheduler Make(StepSchedulerOptions o) {
  StatusOr<StepScheduler> s = StepScheduler::Create(o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

StepSchedulerOptions Options(int ranks, int64_t step_tokens, int64_t kv) {
  return {.num_ranks = ranks,
          .max_step_tokens = step_tokens,
          .max_running = 8,
          .kv_positions_per_rank = kv,
          .min_chunk = 16};
}

TEST(StepSchedulerTest, RefusesOptionsAndJobsThatCannotWork) {
  StepSchedulerOptions o = Options(1, 64, 1000);
  o.max_running = 65;
  EXPECT_FALSE(StepScheduler::Create(o).ok());
  o = Options(0, 64, 1000);
  EXPECT_FALSE(StepScheduler::Create(o).ok());
  StepScheduler s = Make(Options(2, 64, 100));
  EXPECT_TRUE(s.Add(1, 10, 4).ok());
  EXPECT_EQ(s.Add(1, 10, 4).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.Add(2, 0, 4).code(), StatusCode::kInvalidArgument);
  // 2 * ceil(300 / 4) = 150 positions on the busiest rank: more than there are.
  EXPECT_EQ(s.Add(3, 300, 1).code(), StatusCode::kOutOfRange);
}

TEST(StepSchedulerTest, PrefillsThenDecodesEveryRunningJobTogether) {
  StepScheduler s = Make(Options(1, 256, 10000));
  for (StepJobId id : {1, 2, 3}) ASSERT_TRUE(s.Add(id, 20 + id, 8).ok());
  PlannedStep first = s.Next();
  ASSERT_EQ(first.starts.size(), 3u);
  EXPECT_EQ(first.prefill_tokens(), 21 + 22 + 23);
  EXPECT_EQ(first.decode_tokens(), 0);
  EXPECT_EQ(first.starts[0].capacity_per_rank, StepScheduler::ReservationPerRank(21, 8, 1));
  s.Completed(first);
  PlannedStep second = s.Next();
  EXPECT_TRUE(second.starts.empty());
  ASSERT_EQ(second.decode_tokens(), 3);
  EXPECT_EQ(second.entries[0], (PlannedEntry{1, PlannedKind::kDecode, 21, 1}));
  s.Completed(second);
  s.Remove(2, /*freed_by_workers=*/true);
  s.Remove(3, /*freed_by_workers=*/false);  // cancelled: the next step frees it
  PlannedStep third = s.Next();
  EXPECT_EQ(third.ends, std::vector<StepJobId>{3});
  EXPECT_EQ(third.decode_tokens(), 1);
  EXPECT_EQ(s.running(), 1);
  s.Remove(1, true);
  EXPECT_TRUE(s.Next().empty());
  EXPECT_EQ(s.reserved_per_rank(), 0);
}

TEST(StepSchedulerTest, ChunksALongPromptInMultiplesOfTwiceTheRanks) {
  StepScheduler s = Make(Options(3, 100, 100000));
  ASSERT_TRUE(s.Add(7, 1003, 2).ok());
  int64_t next = 0;
  while (true) {
    PlannedStep step = s.Next();
    ASSERT_EQ(step.entries.size(), 1u);
    const PlannedEntry& e = step.entries[0];
    if (e.kind == PlannedKind::kDecode) break;
    EXPECT_EQ(e.begin, next);
    EXPECT_LE(e.count, 100);
    if (e.begin + e.count < 1003) EXPECT_EQ(e.count % 6, 0) << e.count;
    next = e.begin + e.count;
    s.Completed(step);
  }
  EXPECT_EQ(next, 1003);
}

TEST(StepSchedulerTest, ShortJobsGoFirstAndALongPromptIsNeverStarved) {
  StepScheduler s = Make(Options(1, 64, 100000));
  ASSERT_TRUE(s.Add(1, 5000, 4).ok());
  PlannedStep step = s.Next();
  s.Completed(step);
  ASSERT_TRUE(s.Add(2, 60, 4).ok());  // fewer tokens left than job 1: first
  ASSERT_TRUE(s.Add(3, 200, 4).ok());
  // 4 tokens are left after job 2's 60: less than min_chunk, so nobody gets a sliver.
  step = s.Next();
  ASSERT_EQ(step.entries.size(), 1u);
  EXPECT_EQ(step.entries[0].job, 2u);
  EXPECT_EQ(step.entries[0].count, 60);
  s.Completed(step);
  // Job 1 got nothing last step: it goes first now, ahead of job 3 and job 2's decode aside.
  step = s.Next();
  ASSERT_EQ(step.entries.size(), 2u);
  EXPECT_EQ(step.entries[0], (PlannedEntry{2, PlannedKind::kDecode, 60, 1}));
  EXPECT_EQ(step.entries[1].job, 1u);
  EXPECT_EQ(step.entries[1].count, 62);  // 63 tokens left, cut to a multiple of 2
  s.Completed(step);
  step = s.Next();
  EXPECT_EQ(step.entries[1].job, 3u);
}

TEST(StepSchedulerTest, TheWorkBoundShortensChunksDeepIntoAPrompt) {
  StepSchedulerOptions o = Options(1, 100000, 1000000);
  o.max_prefill_work = 1000 * 1000;  // a 1000-token chunk at the start
  o.min_chunk = 64;
  StepScheduler s = Make(o);
  ASSERT_TRUE(s.Add(1, 200000, 2).ok());
  std::vector<int64_t> chunks;
  for (int i = 0; i < 40; ++i) {
    PlannedStep step = s.Next();
    for (const PlannedEntry& e : step.entries) {
      EXPECT_TRUE(e.count <= 64 || e.count * (e.begin + e.count) <= o.max_prefill_work);
      chunks.push_back(e.count);
    }
    s.Completed(step);
  }
  EXPECT_EQ(chunks.front(), 1000);
  EXPECT_LT(chunks.back(), chunks.front());
  EXPECT_GE(chunks.back(), 64);  // the floor: every step makes progress
}

// An inter-token latency target's bound (SetStepWorkBound) cuts chunks as max_prefill_work does,
// the lower of the two holding, and StepWork counts what the bounds count.
TEST(StepSchedulerTest, AStepWorkBoundCutsChunksBesideDecodingJobs) {
  StepSchedulerOptions o = Options(1, 100000, 1000000);
  o.max_prefill_work = 4000 * 4000;
  o.min_chunk = 16;
  StepScheduler s = Make(o);
  ASSERT_TRUE(s.Add(1, 40, 4).ok());  // a short job: decodes from the second step on
  PlannedStep step = s.Next();
  s.Completed(step);
  EXPECT_EQ(s.decoding(), 1);
  ASSERT_TRUE(s.Add(2, 200000, 2).ok());
  step = s.Next();  // max_prefill_work alone: 4000 tokens at the start
  ASSERT_EQ(step.entries.size(), 2u);
  EXPECT_EQ(step.entries[1].count, 4000);
  EXPECT_DOUBLE_EQ(s.StepWork(step), 4000.0 * 4000.0);
  s.Completed(step);
  s.SetStepWorkBound(100 * (4000 + 100));  // 100 more tokens after the 4000
  step = s.Next();
  ASSERT_EQ(step.entries.size(), 2u);
  EXPECT_EQ(step.entries[1].begin, 4000);
  EXPECT_EQ(step.entries[1].count, 100);
  EXPECT_LE(s.StepWork(step), 100.0 * 4100.0);
  s.Completed(step);
  s.SetStepWorkBound(0);  // nothing fits: the first chunk still gets min_chunk tokens
  step = s.Next();
  EXPECT_EQ(step.entries[1].count, 16);
  s.Completed(step);
  s.SetStepWorkBound(std::nullopt);  // back to max_prefill_work's bound
  step = s.Next();
  EXPECT_GT(step.entries[1].count, 100);
  EXPECT_LE(s.StepWork(step), static_cast<double>(o.max_prefill_work));
}

// The prompt's chunks with `ranks` ranks and `ring_pairs_per_row`, under the work bound of the
// test above over all ranks (`per_rank` false) or on each rank.
std::vector<int64_t> LongPromptChunks(int ranks, int64_t ring_pairs_per_row,
                                      bool per_rank = false) {
  StepSchedulerOptions o = Options(ranks, 100000, 1000000);
  o.max_prefill_work = per_rank ? 1000 * 1000 : 1000 * 1000 / ranks;
  o.min_chunk = 64;
  o.ring_pairs_per_row = ring_pairs_per_row;
  StepScheduler s = Make(o);
  EXPECT_TRUE(s.Add(1, 200000, 2).ok());
  std::vector<int64_t> chunks;
  for (int i = 0; i < 40; ++i) {
    PlannedStep step = s.Next();
    for (const PlannedEntry& e : step.entries) chunks.push_back(e.count);
    s.Completed(step);
  }
  return chunks;
}

TEST(StepSchedulerTest, OverSeveralRanksNoChunkIsShorterThanItsRingPass) {
  // 4 ranks, 128 pairs per row: R = 3 x 128 = 384 positions hide a chunk's ring pass.
  const std::vector<int64_t> ring = LongPromptChunks(4, 128);
  EXPECT_EQ(ring.front(), 1000);  // 1000 x max(1000, 384) pairs: the bound as on one rank
  for (int64_t c : ring) EXPECT_GE(c, 384);
  EXPECT_EQ(ring.back(), 384);  // deep in the prompt the ring pass alone exceeds the bound
  // Without the ring counted the work bound cuts chunks deep in the prompt below R.
  const std::vector<int64_t> plain = LongPromptChunks(4, 0);
  EXPECT_LT(plain.back(), 384);
  // One rank has no ring: the option changes nothing.
  EXPECT_EQ(LongPromptChunks(1, 128), LongPromptChunks(1, 0));
  StepSchedulerOptions o = Options(2, 64, 1000);
  o.ring_pairs_per_row = -1;
  EXPECT_FALSE(StepScheduler::Create(o).ok());
}

TEST(StepSchedulerTest, TheWorkBoundIsPerRank) {
  // Each of N ranks computes about 1/N of a step's pairs: the same bound lets N ranks take N
  // times the pairs, a chunk sqrt(N) times as long at the prompt's start.
  EXPECT_EQ(LongPromptChunks(1, 0, true).front(), 1000);
  EXPECT_EQ(LongPromptChunks(4, 0, true).front(), 2000);
  EXPECT_EQ(LongPromptChunks(4, 0, false).front(), 1000);
  StepSchedulerOptions o = Options(2, 64, 1000);
  o.max_prefill_work = (int64_t{1} << 52) + 1;
  EXPECT_FALSE(StepScheduler::Create(o).ok());
}

TEST(StepSchedulerTest, ARingPassCountsAgainstTheStepsWork) {
  // Two ranks, R = 200. A job 10000 positions in has a ring pass of (10000 + c) x 200 pairs,
  // more than the bound: it runs alone at R; a short job waiting behind gets the next step.
  StepSchedulerOptions o = Options(2, 100000, 1000000);
  o.max_prefill_work = 500 * 1000;  // per rank: 10^6 pairs a step over both
  o.min_chunk = 16;
  o.ring_pairs_per_row = 200;
  StepScheduler s = Make(o);
  ASSERT_TRUE(s.Add(1, 20000, 2).ok());
  int64_t prefilled = 0;
  while (prefilled < 10000) {
    PlannedStep step = s.Next();
    ASSERT_EQ(step.entries.size(), 1u);
    prefilled += step.entries[0].count;
    s.Completed(step);
  }
  ASSERT_TRUE(s.Add(2, 100, 2).ok());
  PlannedStep step = s.Next();
  // The short job goes first (fewest remaining tokens): 100 x 200 pairs; then the long one's
  // chunk, whose ring pass no longer fits the work left, is left for the next step.
  ASSERT_EQ(step.entries.size(), 1u);
  EXPECT_EQ(step.entries[0].job, 2u);
  s.Completed(step);
  step = s.Next();
  bool long_job = false;
  for (const PlannedEntry& e : step.entries)
    if (e.job == 1) long_job = e.kind == PlannedKind::kPrefill && e.count >= 200;
  EXPECT_TRUE(long_job);  // starved last step: first now, at least R
}

TEST(StepSchedulerTest, JobsWaitForKvAndARefusedStartHoldsTheQueue) {
  StepScheduler s = Make(Options(1, 1000, 100));
  ASSERT_TRUE(s.Add(1, 40, 11).ok());  // 50 positions each
  ASSERT_TRUE(s.Add(2, 40, 11).ok());
  ASSERT_TRUE(s.Add(3, 40, 11).ok());
  PlannedStep step = s.Next();
  EXPECT_EQ(step.starts.size(), 2u);
  EXPECT_EQ(s.waiting(), 1);
  s.Completed(step);
  // The workers refuse job 2 (their plan counts more than positions): it waits, and so does
  // job 3, until job 1 leaves.
  ASSERT_TRUE(s.StartRefused(2).ok());
  step = s.Next();
  EXPECT_TRUE(step.starts.empty());
  s.Completed(step);
  s.Remove(1, true);
  step = s.Next();
  ASSERT_EQ(step.starts.size(), 2u);
  EXPECT_EQ(step.starts[0].job, 2u);
  s.Completed(step);
  s.Remove(3, true);
  // Refused with nothing else running: waiting would not help.
  EXPECT_EQ(s.StartRefused(2).code(), StatusCode::kFailedPrecondition);
}

// jobs_waited_for_kv (the metric kv_admission_waits_total): every job that could not start for
// want of KV, each once however many plans it waits through; not the jobs held back only by the
// step's token budget or max_running; a refused start counts its job.
TEST(StepSchedulerTest, CountsEachJobThatWaitsForKvOnce) {
  StepSchedulerOptions o = Options(1, 1000, 100);
  o.max_running = 2;
  StepScheduler s = Make(o);
  ASSERT_TRUE(s.Add(1, 40, 11).ok());  // 50 positions each
  ASSERT_TRUE(s.Add(2, 40, 11).ok());
  PlannedStep step = s.Next();
  EXPECT_EQ(step.starts.size(), 2u);
  s.Completed(step);
  EXPECT_EQ(s.jobs_waited_for_kv(), 0);
  ASSERT_TRUE(s.Add(3, 20, 1).ok());  // 20 positions
  // Job 3 is held back by max_running, and would not fit the 100 positions either: KV.
  s.Completed(s.Next());
  EXPECT_EQ(s.jobs_waited_for_kv(), 1);
  for (int i = 0; i < 3; ++i) s.Completed(s.Next());  // it waits on: still once
  EXPECT_EQ(s.jobs_waited_for_kv(), 1);
  s.Remove(1, true);
  step = s.Next();
  ASSERT_EQ(step.starts.size(), 1u);
  EXPECT_EQ(step.starts[0].job, 3u);
  s.Completed(step);
  // 70 reserved; a job of 20 waits only for max_running (KV has room): not counted.
  ASSERT_TRUE(s.Add(4, 20, 1).ok());
  s.Completed(s.Next());
  EXPECT_EQ(s.jobs_waited_for_kv(), 1);
  s.Remove(3, true);
  step = s.Next();  // job 4 starts beside job 2
  ASSERT_EQ(step.starts.size(), 1u);
  s.Completed(step);
  // The workers refuse job 4's start for memory: it waits for KV (counted at once), and a job
  // that arrives meanwhile waits behind the refusal.
  ASSERT_TRUE(s.StartRefused(4).ok());
  EXPECT_EQ(s.jobs_waited_for_kv(), 2);
  ASSERT_TRUE(s.Add(5, 4, 1).ok());
  s.Completed(s.Next());
  EXPECT_EQ(s.jobs_waited_for_kv(), 3);
  // Jobs held back only by the step's token budget are not waiting for KV.
  StepScheduler t = Make(Options(1, 16, 1000));
  for (StepJobId id : {1, 2, 3}) ASSERT_TRUE(t.Add(id, 40, 4).ok());
  t.Completed(t.Next());
  EXPECT_EQ(t.waiting(), 2);
  EXPECT_EQ(t.jobs_waited_for_kv(), 0);
}

// A job whose KV costs less than dense (a DuoAttention policy's streaming heads keep only their
// window) counts its cost against the KV, while its start still reserves all its positions.
TEST(StepSchedulerTest, AJobsKvCostIsWhatItHoldsAgainstTheBudget) {
  StepScheduler s = Make(Options(1, 1000, 100));
  ASSERT_TRUE(s.Add(1, 60, 11, 35).ok());  // 70 positions, as much memory as 35 of dense KV
  ASSERT_TRUE(s.Add(2, 60, 11, 35).ok());
  ASSERT_TRUE(s.Add(3, 60, 11).ok());      // dense: 70
  EXPECT_EQ(s.Add(4, 200, 1, 90).code(), StatusCode::kOk);  // 200 positions, cost 90
  EXPECT_EQ(s.Add(5, 60, 11, 101).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(s.Add(6, 60, 11, -1).code(), StatusCode::kInvalidArgument);
  PlannedStep step = s.Next();
  ASSERT_EQ(step.starts.size(), 2u);  // 35 + 35; the dense job's 70 would exceed 100
  EXPECT_EQ(step.starts[0].capacity_per_rank, 70);
  EXPECT_EQ(s.reserved_per_rank(), 70);
  s.Completed(step);
  s.Remove(1, true);
  s.Remove(2, true);
  EXPECT_EQ(s.reserved_per_rank(), 0);
  step = s.Next();
  ASSERT_EQ(step.starts.size(), 1u);
  EXPECT_EQ(s.reserved_per_rank(), 70);
  // Refused: its cost is released.
  ASSERT_TRUE(s.Add(7, 10, 1, 20).ok());
  s.Completed(step);
  step = s.Next();
  ASSERT_EQ(step.starts.size(), 1u);
  EXPECT_EQ(step.starts[0].job, 7u);
  EXPECT_EQ(s.reserved_per_rank(), 90);
  ASSERT_TRUE(s.StartRefused(7).ok());
  EXPECT_EQ(s.reserved_per_rank(), 70);
}

// A random load run to the end: every step within its budget, reservations within the KV,
// every job's chunks tiling its prompt in order, and nothing held at the end.
TEST(StepSchedulerTest, RandomLoadKeepsEveryInvariant) {
  std::mt19937_64 rng(5);
  for (const auto& [ranks, ring] : {std::pair{1, 0}, {2, 0}, {3, 0}, {2, 20}, {3, 30}}) {
    StepSchedulerOptions o = Options(ranks, 96, 3000);
    o.max_prefill_work = 50000;
    o.ring_pairs_per_row = ring;
    StepScheduler s = Make(o);
    std::map<StepJobId, int64_t> prefilled, prompt, left;
    std::set<StepJobId> holding;
    StepJobId next_id = 1;
    for (int step_no = 0; step_no < 4000 && (next_id <= 60 || !prompt.empty()); ++step_no) {
      if (next_id <= 60 && rng() % 3 == 0) {
        const int64_t p = 1 + static_cast<int64_t>(rng() % 1500), m = 1 + rng() % 20;
        ASSERT_TRUE(s.Add(next_id, p, m).ok());
        prompt[next_id] = p;
        prefilled[next_id] = 0;
        left[next_id] = m;
        ++next_id;
      }
      PlannedStep step = s.Next();
      for (StepJobId id : step.ends) EXPECT_EQ(holding.erase(id), 1u);
      for (const PlannedStart& st : step.starts) holding.insert(st.job);
      EXPECT_LE(static_cast<int64_t>(step.entries.size()), o.max_step_tokens);
      EXPECT_LE(step.decode_tokens() + step.prefill_tokens(), o.max_step_tokens);
      EXPECT_LE(s.reserved_per_rank(), o.kv_positions_per_rank);
      s.Completed(step);
      std::vector<StepJobId> done;
      for (const PlannedEntry& e : step.entries) {
        EXPECT_TRUE(holding.count(e.job));
        if (e.kind == PlannedKind::kPrefill) {
          EXPECT_EQ(e.begin, prefilled[e.job]);
          prefilled[e.job] += e.count;
          EXPECT_LE(prefilled[e.job], prompt[e.job]);
          if (prefilled[e.job] < prompt[e.job]) continue;
        } else {
          EXPECT_EQ(prefilled[e.job], prompt[e.job]);
        }
        if (--left[e.job] == 0 || rng() % 50 == 0) done.push_back(e.job);
      }
      for (StepJobId id : done) {
        const bool by_workers = rng() % 2 == 0;
        s.Remove(id, by_workers);
        if (by_workers) holding.erase(id);
        prompt.erase(id);
      }
    }
    EXPECT_TRUE(prompt.empty()) << "ranks " << ranks << " ring " << ring;
    s.Next();  // frees the last cancelled ones
    EXPECT_EQ(s.running(), 0);
    EXPECT_EQ(s.reserved_per_rank(), 0);
  }
}

// The prefix cache: a job starting from a cached prefix prefills only the rest and reserves the
// prefix's rows plus the rest's; a kept job's reservation stays with its entry until dropped,
// and a waiting job's shortfall says what to drop.
TEST(StepSchedulerTest, CachedPrefixesAndEntries) {
  StepScheduler s = Make(Options(2, 64, 100));
  ASSERT_TRUE(s.Add(1, 40, 4, 0, std::nullopt, /*keep=*/true).ok());
  PlannedStep step = s.Next();
  ASSERT_EQ(step.starts.size(), 1u);
  EXPECT_TRUE(step.starts[0].keep);
  EXPECT_EQ(step.starts[0].prefix_from, 0u);
  s.Completed(step);
  const int64_t reserved = s.reserved_per_rank();
  // Ended by the coordinator and kept: the next plan keeps it on the workers.
  s.Remove(1, /*freed_by_workers=*/false, /*keep=*/true);
  EXPECT_EQ(s.reserved_per_rank(), reserved);
  EXPECT_EQ(s.cached_per_rank(), reserved);
  EXPECT_EQ(s.running(), 0);
  step = s.Next();
  EXPECT_EQ(step.keeps, std::vector<StepJobId>{1});
  EXPECT_TRUE(step.ends.empty());
  // A follow-up from entry 1: 32 tokens restored (16 rows on the busiest rank).
  ASSERT_TRUE(s.Add(2, 50, 4, 0, CachedStart{1, 32, 16}).ok());
  step = s.Next();
  ASSERT_EQ(step.starts.size(), 1u);
  EXPECT_EQ(step.starts[0].prefix_from, 1u);
  EXPECT_EQ(step.starts[0].prefix_tokens, 32);
  // 16 prefix rows + 2 x ceil(18 / 4) + ceil(3 / 2).
  EXPECT_EQ(step.starts[0].capacity_per_rank, 16 + 10 + 2);
  ASSERT_EQ(step.entries.size(), 1u);
  EXPECT_EQ(step.entries[0].begin, 32);
  EXPECT_EQ(step.entries[0].count, 18);
  // A job that does not fit beside the entry and the follow-up waits; the shortfall says how
  // much, and dropping the entry lets it start.
  ASSERT_TRUE(s.Add(3, 120, 2).ok());
  const int64_t lack = s.KvShortfall();
  EXPECT_GT(lack, 0);
  EXPECT_LE(lack, s.cached_per_rank());
  s.DropCached(1);
  EXPECT_EQ(s.cached_per_rank(), 0);
  EXPECT_EQ(s.KvShortfall(), 0);
  step = s.Next();
  EXPECT_EQ(step.drops, std::vector<uint64_t>{1});
  ASSERT_EQ(step.starts.size(), 1u);
  EXPECT_EQ(step.starts[0].job, 3u);
  // Unknown entries are ignored; a cached prefix must leave a token to prefill.
  s.DropCached(99);
  EXPECT_TRUE(s.Next().drops.empty());
  EXPECT_EQ(s.Add(5, 10, 1, 0, CachedStart{1, 10, 5}).code(), StatusCode::kInvalidArgument);
}

// The prefix cache's shared blocks: a copy that maps the entry's whole blocks counts only its own
// positions while it runs (the entry counts the shared ones), so two fit where two copies would
// not; kept at its end, it counts them again.
TEST(StepSchedulerTest, CopiesSharingTheEntrysBlocksCountOnlyTheirOwnRows) {
  StepScheduler s = Make(Options(1, 64, 200));
  ASSERT_TRUE(s.Add(1, 80, 4, 0, std::nullopt, /*keep=*/true).ok());
  PlannedStep step = s.Next();
  s.Completed(step);
  s.Remove(1, /*freed_by_workers=*/false, /*keep=*/true);
  EXPECT_EQ(s.cached_per_rank(), 83);
  (void)s.Next();
  // 80 tokens restored, 64 of them in shared blocks: 80 + 20 + 3 reserved, 103 - 64 counted.
  const CachedStart shared{1, 80, 80, /*take=*/false, /*capacity=*/0, /*shared_rows=*/64};
  ASSERT_TRUE(s.Add(2, 100, 4, 0, shared, /*keep=*/true).ok());
  ASSERT_TRUE(s.Add(3, 100, 4, 0, shared).ok());
  EXPECT_EQ(s.kv_cost(2), 39);
  EXPECT_EQ(s.kept_cost(2), 103);
  EXPECT_TRUE(s.shares_blocks(2));
  EXPECT_EQ(s.reservation(2), 103);
  step = s.Next();
  ASSERT_EQ(step.starts.size(), 2u);
  EXPECT_TRUE(step.starts[0].prefix_share && step.starts[1].prefix_share);
  EXPECT_EQ(step.starts[0].capacity_per_rank, 103);
  EXPECT_EQ(s.reserved_per_rank(), 83 + 39 + 39);
  s.Completed(step);
  // Kept, job 2 counts its whole KV: the shared blocks twice while entry 1 stays.
  s.Remove(2, /*freed_by_workers=*/true, /*keep=*/true);
  EXPECT_EQ(s.cached_reservation(2), 103);
  EXPECT_EQ(s.reserved_per_rank(), 83 + 103 + 39);
  s.Remove(3, /*freed_by_workers=*/true);
  s.DropCached(1);
  EXPECT_EQ(s.reserved_per_rank(), 103);
  // A job that gives its shared start up counts its whole prompt.
  ASSERT_TRUE(s.Add(4, 100, 4, 0, CachedStart{2, 80, 80, false, 0, 64}).ok());
  EXPECT_EQ(s.kv_cost(4), 39);
  s.ForgetCachedStart(4);
  EXPECT_EQ(s.kv_cost(4), 103);
}

// A parked job (waiting for another job's prefix) takes no part in the plans: it neither starts
// nor waits for KV. Unparked, it waits as any job, from a cached start when given one (here the
// entry the job it waited for left, taken over).
TEST(StepSchedulerTest, AParkedJobWaitsOutsideThePlansUntilUnparked) {
  StepScheduler s = Make(Options(1, 64, 100));
  ASSERT_TRUE(s.Add(1, 40, 4, 0, std::nullopt, /*keep=*/true).ok());
  ASSERT_TRUE(s.Add(2, 48, 4).ok());
  ASSERT_TRUE(s.Park(2).ok());
  EXPECT_TRUE(s.parked(2));
  PlannedStep step = s.Next();
  ASSERT_EQ(step.starts.size(), 1u);
  EXPECT_EQ(step.starts[0].job, 1u);
  s.Completed(step);
  EXPECT_EQ(s.NextWaiting(), std::nullopt);
  EXPECT_EQ(s.KvShortfall(), 0);
  // Job 1 decodes alone until it ends; job 2 never starts, even with room for it.
  for (int i = 0; i < 3; ++i) {
    step = s.Next();
    EXPECT_TRUE(step.starts.empty());
    ASSERT_EQ(step.entries.size(), 1u);
    EXPECT_EQ(step.entries[0].job, 1u);
    s.Completed(step);
  }
  // A started job and an unknown one cannot be parked.
  EXPECT_EQ(s.Park(1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.Park(9).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.Unpark(1, std::nullopt).code(), StatusCode::kInvalidArgument);
  s.Remove(1, /*freed_by_workers=*/true, /*keep=*/true);
  const int64_t entry_cost = s.cached_per_rank();
  ASSERT_GT(entry_cost, 0);
  // A cached start that does not fit leaves the job parked and the entry as it was.
  EXPECT_FALSE(s.Unpark(2, CachedStart{1, 32, 32, /*take=*/true, /*capacity=*/10}).ok());
  EXPECT_TRUE(s.parked(2));
  EXPECT_EQ(s.cached_per_rank(), entry_cost);
  ASSERT_TRUE(s.Unpark(2, CachedStart{1, 32, 32, /*take=*/true, /*capacity=*/60}).ok());
  EXPECT_FALSE(s.parked(2));
  EXPECT_EQ(s.cached_per_rank(), 0);
  step = s.Next();
  ASSERT_EQ(step.starts.size(), 1u);
  EXPECT_EQ(step.starts[0].job, 2u);
  EXPECT_TRUE(step.starts[0].prefix_take);
  EXPECT_EQ(step.starts[0].prefix_tokens, 32);
  ASSERT_EQ(step.entries.size(), 1u);
  EXPECT_EQ(step.entries[0].begin, 32);
  EXPECT_EQ(step.entries[0].count, 16);
  EXPECT_EQ(s.reserved_per_rank(), entry_cost);
  EXPECT_EQ(s.Park(3).code(), StatusCode::kInvalidArgument);
  // A job with a cached start may wait parked (for its entry to be read back) and keeps it.
  ASSERT_TRUE(s.Add(3, 40, 2, 0, CachedStart{2, 16, 16}).ok());
  ASSERT_TRUE(s.Park(3).ok());
  EXPECT_EQ(s.Unpark(3, CachedStart{2, 16, 16}).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(s.Unpark(3, std::nullopt).ok());
  s.PromoteSaved(7);
  step = s.Next();
  EXPECT_EQ(step.promotes, std::vector<uint64_t>{7});
  ASSERT_EQ(step.starts.size(), 1u);
  EXPECT_EQ(step.starts[0].prefix_tokens, 16);
}

}  // namespace
}  // namespace millipede
