// JobTable: cancelling is idempotent (a job that already ended is left as it is; only ids never
// issued are NotFound), the ended jobs' final status is kept for a bounded number of them, and
// jobs that share a long prefix with a job in flight wait for its KV to be cached.
#include "coordinator/job_table.h"

#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

namespace millipede {
namespace {

// Counts the events a job's observer gets.
struct CountingObserver final : JobObserver {
  void OnProgress(int64_t, int64_t) override {}
  void OnToken(const SampledToken&, std::string_view) override {}
  void OnComplete(const JobCompletion&) override { ++completions; }
  void OnError(const Status&) override { ++errors; }
  int completions = 0, errors = 0;
};

class JobTableTest : public ::testing::Test {
 protected:
  explicit JobTableTest(int64_t kv_positions = 1 << 20)
      : table_(MakeBatch(kv_positions), /*metrics=*/nullptr) {}

  static StepScheduler MakeBatch(int64_t kv_positions) {
    return std::move(StepScheduler::Create({.kv_positions_per_rank = kv_positions})).value();
  }

  // Queues a job of a 4-token prompt; its id.
  JobId AddJob() {
    auto job = std::make_shared<JobTable::Job>();
    job->descriptor.prompt_ids = {1, 2, 3, 4};
    job->descriptor.max_new_tokens = 2;
    job->observer = observer_;
    StatusOr<JobId> id = table_.Add(job, 0);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    return id.ok() ? *id : 0;
  }

  // Ends job `id` as cancelled, running the observer's events.
  void EndCancelled(JobId id) {
    std::shared_ptr<JobTable::Job> job = table_.Find(id);
    ASSERT_NE(job, nullptr);
    JobTable::Deliveries out;
    table_.Finish(*job, CancelledError("job " + std::to_string(id) + " was cancelled"), &out,
                  /*freed_by_workers=*/true);
    for (auto& deliver : out) deliver();
  }

  std::shared_ptr<CountingObserver> observer_ = std::make_shared<CountingObserver>();
  JobTable table_;
};

TEST_F(JobTableTest, CancellingAnEndedJobIsANoOp) {
  const JobId id = AddJob();
  ASSERT_TRUE(table_.RequestCancel(id).ok());
  EXPECT_TRUE(table_.Find(id)->cancel_requested);
  EndCancelled(id);
  EXPECT_EQ(observer_->errors, 1);
  // The client's second cancel, racing the end it caused: Ok, nothing more happens.
  EXPECT_TRUE(table_.RequestCancel(id).ok());
  EXPECT_TRUE(table_.RequestCancel(id).ok());
  EXPECT_EQ(observer_->errors, 1);
  EXPECT_EQ(table_.Find(id), nullptr);
  StatusOr<JobStatusInfo> status = table_.GetStatus(id);
  ASSERT_TRUE(status.ok()) << status.status().ToString();
  EXPECT_EQ(status->state, JobState::kCancelled);

  // A failed job likewise keeps its final state.
  const JobId failed = AddJob();
  std::shared_ptr<JobTable::Job> job = table_.Find(failed);
  JobTable::Deliveries out;
  table_.Finish(*job, InternalError("boom"), &out, /*freed_by_workers=*/true);
  EXPECT_TRUE(table_.RequestCancel(failed).ok());
  EXPECT_EQ(table_.GetStatus(failed)->state, JobState::kFailed);
}

TEST_F(JobTableTest, OnlyIdsNeverIssuedAreNotFound) {
  const JobId id = AddJob();
  EXPECT_EQ(table_.RequestCancel(0).code(), StatusCode::kNotFound);
  EXPECT_EQ(table_.RequestCancel(id + 1).code(), StatusCode::kNotFound);
  EXPECT_EQ(table_.RequestCancel(~JobId{0}).code(), StatusCode::kNotFound);
  EXPECT_EQ(table_.GetStatus(id + 1).status().code(), StatusCode::kNotFound);
  // A refused Add issues no id.
  auto too_big = std::make_shared<JobTable::Job>();
  too_big->descriptor.prompt_ids.assign(4, 1);
  too_big->descriptor.max_new_tokens = 0;
  EXPECT_FALSE(table_.Add(too_big, 0).ok());
  EXPECT_EQ(table_.RequestCancel(id + 1).code(), StatusCode::kNotFound);
  EXPECT_TRUE(table_.RequestCancel(id).ok());
}

TEST_F(JobTableTest, EndedJobsKeptAreBoundedAndOlderOnesStillCancelQuietly) {
  const JobId first = AddJob();
  EndCancelled(first);
  for (size_t i = 0; i < JobTable::kEndedKept; ++i) EndCancelled(AddJob());
  // The first job's final status is gone (memory stays bounded) ...
  StatusOr<JobStatusInfo> status = table_.GetStatus(first);
  ASSERT_EQ(status.status().code(), StatusCode::kNotFound);
  EXPECT_NE(status.status().message().find("ended"), std::string::npos)
      << status.status().ToString();
  // ... but cancelling it is still the no-op it was.
  EXPECT_TRUE(table_.RequestCancel(first).ok());
  EXPECT_EQ(table_.GetStatus(first + 1)->state, JobState::kCancelled);
}

// With the prefix cache on: a table whose jobs share a 64-token document (blocks of 16 tokens).
class PrefixWaitTest : public JobTableTest {
 protected:
  explicit PrefixWaitTest(int64_t wait_tokens = 32, int64_t kv_positions = 1 << 20,
                          int64_t share_unit_rows = 0)
      : JobTableTest(kv_positions) {
    StatusOr<PrefixCache> cache = PrefixCache::Create(16, 1, "model");
    EXPECT_TRUE(cache.ok()) << cache.status().ToString();
    if (cache.ok()) cache->SetShareUnit(share_unit_rows);
    table_.EnablePrefixCache(std::move(cache).value(), AttentionPolicy{},
                             /*selected_kv_host=*/false, wait_tokens);
    document_.resize(64);
    std::iota(document_.begin(), document_.end(), 100);
  }

  // Queues a question about the document: its 64 tokens, then four distinct tokens.
  JobId Ask(int32_t question, bool pin = false, int64_t max_new_tokens = 2) {
    auto job = std::make_shared<JobTable::Job>();
    job->descriptor.prompt_ids = document_;
    for (int32_t i = 0; i < 4; ++i) job->descriptor.prompt_ids.push_back(question * 10 + i);
    job->descriptor.max_new_tokens = max_new_tokens;
    job->observer = observer_;
    job->pin = pin;
    StatusOr<JobId> id = table_.Add(job, 0);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    return id.ok() ? *id : 0;
  }

  // Runs the plans until job `id` has prefilled its prompt, as the step runner does.
  void Prefill(JobId id) {
    for (int steps = 0; steps < 8; ++steps) {
      const PlannedStep step = table_.batch().Next();
      for (const PlannedStart& start : step.starts)
        table_.Start(*table_.Find(start.job), JobTable::Clock::now());
      table_.RecordCommitted(step, {});
      table_.batch().Completed(step);
      if (table_.batch().holds_kv(id) &&
          table_.Find(id)->positions.total() == std::ssize(table_.Find(id)->descriptor.prompt_ids))
        return;
    }
    ADD_FAILURE() << "job " << id << " did not prefill";
  }

  std::vector<int32_t> document_;
};

// A KV budget of about two questions: the waiting ones' copies never fit beside the running
// one, so they take the entries over in turn.
class PrefixWaitTightTest : public PrefixWaitTest {
 protected:
  PrefixWaitTightTest() : PrefixWaitTest(32, 150) {}
};

// The workers share blocks of 16 rows: 64 cached positions are 4 whole blocks.
class PrefixShareTest : public PrefixWaitTest {
 protected:
  PrefixShareTest() : PrefixWaitTest(32, 150, /*share_unit_rows=*/16) {}
};

// Questions released together when their document's job ends all start from its entry at once,
// sharing its blocks (none takes it over, and each counts only its own rows), holding it while
// they run; neither is kept as an entry of its own, and the document's entry stays, unheld.
TEST_F(PrefixShareTest, QuestionsReleasedTogetherShareTheirDocumentsEntry) {
  const JobId first = Ask(1);
  const JobId second = Ask(2);
  const JobId third = Ask(3);
  EXPECT_EQ(table_.Find(third)->waits_for, first);
  Prefill(first);
  EndCancelled(first);
  const int64_t entry_cost = table_.batch().cached_per_rank();
  for (JobId id : {second, third}) {
    std::shared_ptr<JobTable::Job> job = table_.Find(id);
    EXPECT_EQ(job->waits_for, 0u);
    EXPECT_EQ(job->cached_from, first);
    EXPECT_TRUE(job->cache_shares);
    EXPECT_FALSE(job->cache_take);
    EXPECT_TRUE(table_.batch().shares_blocks(id));
    EXPECT_EQ(table_.batch().kv_cost(id), table_.batch().kept_cost(id) - 64);
  }
  Prefill(second);
  Prefill(third);
  EXPECT_TRUE(table_.batch().holds_kv(second) && table_.batch().holds_kv(third));
  EXPECT_EQ(table_.prefix_cache()->index().Info(first)->holders, 2);
  EndCancelled(second);
  EndCancelled(third);
  EXPECT_EQ(table_.prefix_cache()->stats().entries, 1);
  EXPECT_EQ(table_.prefix_cache()->index().Info(first)->holders, 0);
  EXPECT_EQ(table_.batch().cached_per_rank(), entry_cost);
  EXPECT_EQ(table_.batch().reserved_per_rank(), entry_cost);
}

TEST_F(PrefixWaitTightTest, QuestionsWaitForTheDocumentsFirstJobAndThenForEachOther) {
  const JobId first = Ask(1);
  const JobId second = Ask(2);
  const JobId third = Ask(3);
  // Nothing is cached: the later questions wait for the first, which shares the document.
  EXPECT_EQ(table_.Find(first)->waits_for, 0u);
  EXPECT_EQ(table_.Find(second)->waits_for, first);
  EXPECT_EQ(table_.Find(third)->waits_for, first);
  EXPECT_TRUE(table_.batch().parked(second));
  Prefill(first);
  EXPECT_FALSE(table_.batch().holds_kv(second));
  EXPECT_FALSE(table_.batch().holds_kv(third));
  EndCancelled(first);  // after its prompt was stored: its KV is kept
  // The second question takes the entry over; the third then waits for the second.
  std::shared_ptr<JobTable::Job> job = table_.Find(second);
  EXPECT_EQ(job->waits_for, 0u);
  EXPECT_FALSE(table_.batch().parked(second));
  EXPECT_EQ(job->cached_from, first);
  EXPECT_EQ(job->cached_tokens, 64);
  EXPECT_TRUE(job->cache_take);
  EXPECT_EQ(table_.Find(third)->waits_for, second);
  // Once the second's prompt is stored, the third's copy of it fits beside it: it starts from
  // the running second.
  Prefill(second);
  job = table_.Find(third);
  EXPECT_EQ(job->waits_for, 0u);
  EXPECT_TRUE(job->copies_running);
  EXPECT_EQ(job->cached_from, second);
  EXPECT_EQ(job->cached_tokens, 64);
  Prefill(third);
  EndCancelled(second);
  // Each question after the first prefilled only its own four tokens.
  EXPECT_EQ(table_.prefix_cache()->stats().hit_tokens, 128);
}

TEST_F(PrefixWaitTest, APinnedDocumentsQuestionsCopyItAtOnce) {
  const JobId first = Ask(1, /*pin=*/true);
  const JobId second = Ask(2);
  const JobId third = Ask(3);
  Prefill(first);
  EndCancelled(first);
  // A pinned entry is copied, so both questions start from it together.
  for (JobId id : {second, third}) {
    std::shared_ptr<JobTable::Job> job = table_.Find(id);
    EXPECT_EQ(job->waits_for, 0u);
    EXPECT_EQ(job->cached_from, first);
    EXPECT_TRUE(job->cache_held);
  }
  // A question arriving now finds the document cached and waits for no one.
  const JobId fourth = Ask(4);
  EXPECT_EQ(table_.Find(fourth)->waits_for, 0u);
  EXPECT_EQ(table_.Find(fourth)->cached_tokens, 64);
}

TEST_F(PrefixWaitTest, AFailedOrCancelledLeaderReleasesItsFollowers) {
  const JobId first = Ask(1);
  const JobId second = Ask(2);
  const JobId third = Ask(3);
  // The first ends before it stored anything: nothing is cached, the second no longer waits
  // and runs uncached, and the third waits for the second.
  std::shared_ptr<JobTable::Job> job = table_.Find(first);
  JobTable::Deliveries out;
  table_.Finish(*job, InternalError("boom"), &out, /*freed_by_workers=*/true);
  EXPECT_EQ(table_.Find(second)->waits_for, 0u);
  EXPECT_EQ(table_.Find(second)->cached_tokens, 0);
  EXPECT_FALSE(table_.batch().parked(second));
  EXPECT_EQ(table_.Find(third)->waits_for, second);
  // A parked job cancelled while it waits leaves nothing behind.
  EndCancelled(third);
  Prefill(second);
  EndCancelled(second);
  EXPECT_TRUE(table_.jobs().empty());
  EXPECT_EQ(table_.prefix_cache()->stats().entries, 1);
}

// A document loaded by a job of one token leaves an entry with no room for longer answers: the
// first question copies it, and once the copy is on the workers the entry is dropped (as a
// take-over would have taken it); the next question waits for that one and takes its entry over.
TEST_F(PrefixWaitTest, AnEntryTooSmallToTakeOverIsCopiedOnceThenDropped) {
  const JobId load = Ask(0, /*pin=*/false, /*max_new_tokens=*/1);
  Prefill(load);
  EndCancelled(load);
  ASSERT_EQ(table_.prefix_cache()->stats().entries, 1);
  const JobId first = Ask(1, /*pin=*/false, /*max_new_tokens=*/8);
  std::shared_ptr<JobTable::Job> job = table_.Find(first);
  EXPECT_TRUE(job->cache_held);
  EXPECT_TRUE(job->cache_drop_source);
  EXPECT_EQ(job->cached_tokens, 64);
  const int64_t entry_cost = table_.batch().cached_per_rank();
  Prefill(first);
  // The copy was committed: the entry is gone, its reservation with it.
  EXPECT_FALSE(job->cache_drop_source);
  EXPECT_EQ(table_.prefix_cache()->stats().entries, 0);
  EXPECT_LT(table_.batch().cached_per_rank(), entry_cost);
  // The next question copies the first's stored prompt while it runs, and holds its entry once
  // it ends.
  const JobId second = Ask(2, /*pin=*/false, /*max_new_tokens=*/8);
  job = table_.Find(second);
  EXPECT_EQ(job->waits_for, 0u);
  EXPECT_TRUE(job->copies_running);
  EXPECT_EQ(job->cached_from, first);
  EndCancelled(first);
  EXPECT_TRUE(job->cache_held);
  EXPECT_FALSE(job->copies_running);
  EXPECT_EQ(job->cached_tokens, 64);
  // Once its copy is made, the entry goes: the second's own KV holds the document.
  EXPECT_TRUE(job->cache_drop_source);
  ASSERT_EQ(table_.prefix_cache()->stats().entries, 1);
  Prefill(second);
  EXPECT_EQ(table_.prefix_cache()->stats().entries, 0);
}

// Questions waiting for a document's job start once its prompt is stored, copying it from the
// running job; one that has not started when that job ends holds its entry, or, when the job
// failed and left nothing, waits again.
TEST_F(PrefixWaitTest, WaitingQuestionsStartOnceTheirDocumentIsStored) {
  const JobId first = Ask(1);
  const JobId second = Ask(2);
  const JobId third = Ask(3);
  Prefill(first);
  for (JobId id : {second, third}) {
    std::shared_ptr<JobTable::Job> job = table_.Find(id);
    EXPECT_EQ(job->waits_for, 0u);
    EXPECT_TRUE(job->copies_running);
    EXPECT_EQ(job->cached_from, first);
    EXPECT_EQ(job->cached_tokens, 64);
  }
  const PlannedStep step = table_.batch().Next();
  ASSERT_EQ(step.starts.size(), 2u);
  for (const PlannedStart& start : step.starts) {
    EXPECT_EQ(start.prefix_from, first);
    EXPECT_EQ(start.prefix_tokens, 64);
    EXPECT_FALSE(start.prefix_take);
  }
  EXPECT_EQ(table_.prefix_cache()->stats().hit_tokens, 128);
  for (const PlannedStart& start : step.starts)
    table_.Start(*table_.Find(start.job), JobTable::Clock::now());
  // A start the workers refuse for memory waits again on the running document's job.
  std::shared_ptr<JobTable::Job> refused = table_.Find(third);
  ASSERT_TRUE(table_.Requeue(*refused));
  EXPECT_TRUE(refused->copies_running);
  EXPECT_EQ(refused->cached_from, first);
  // A question arriving now, the document's job still running, starts from it at once too.
  const JobId fourth = Ask(4);
  EXPECT_TRUE(table_.Find(fourth)->copies_running);
  // The document's job fails before the fourth starts and leaves nothing: the fourth waits
  // again, now for the second (running, the same document, its prompt not yet stored).
  std::shared_ptr<JobTable::Job> job = table_.Find(first);
  JobTable::Deliveries out;
  table_.Finish(*job, InternalError("boom"), &out, /*freed_by_workers=*/true);
  job = table_.Find(fourth);
  EXPECT_FALSE(job->copies_running);
  EXPECT_EQ(job->cached_tokens, 0);
  EXPECT_EQ(job->waits_for, second);
  EXPECT_TRUE(table_.batch().parked(fourth));
  // So does the refused third, which no longer has anything to copy.
  EXPECT_EQ(refused->cached_tokens, 0);
  EXPECT_EQ(refused->waits_for, second);
}

// A copied entry that another job also holds, or that is pinned, stays.
TEST_F(PrefixWaitTest, ACopiedEntryThatOthersWantStays) {
  const JobId load = Ask(0, /*pin=*/true, /*max_new_tokens=*/1);
  Prefill(load);
  EndCancelled(load);
  const JobId first = Ask(1, /*pin=*/false, /*max_new_tokens=*/8);
  EXPECT_FALSE(table_.Find(first)->cache_drop_source);  // pinned: never exclusive
  Prefill(first);
  EXPECT_EQ(table_.prefix_cache()->stats().entries, 1);
}

// Under the wait threshold (the document is 64 tokens, the threshold 100) nobody waits.
class PrefixNoWaitTest : public PrefixWaitTest {
 protected:
  PrefixNoWaitTest() : PrefixWaitTest(100) {}
};

TEST_F(PrefixNoWaitTest, ShortSharedPrefixesDoNotWait) {
  Ask(1);
  const JobId second = Ask(2);
  EXPECT_EQ(table_.Find(second)->waits_for, 0u);
  EXPECT_FALSE(table_.batch().parked(second));
}

// A hit on the disk tier moves the entry up to the host tier first: the job waits (parked) while
// the workers read it back in the background, then starts from it; an entry a worker could not
// read is dropped and its job runs uncached.
class PromotionTest : public JobTableTest {
 protected:
  PromotionTest() {
    StatusOr<PrefixCache> cache = PrefixCache::Create(16, 1, "model");
    EXPECT_TRUE(cache.ok()) << cache.status().ToString();
    cache->SetHostTier(/*bytes_per_rank=*/host_bytes_, /*position_bytes=*/16);
    cache->SetDiskTier(1 << 20);
    const uint64_t key = cache->KeyOf(AttentionPolicy{});
    table_.EnablePrefixCache(std::move(cache).value(), AttentionPolicy{},
                             /*selected_kv_host=*/false, /*wait_tokens=*/0);
    std::vector<control::CacheEntryFacts> found;
    for (uint64_t id : {5, 6}) {
      std::vector<int32_t> tokens(64);
      std::iota(tokens.begin(), tokens.end(), static_cast<int32_t>(100 * id));
      found.push_back({.entry = id,
                       .key = key,
                       .model_key = "model",
                       .tokens = tokens,
                       .every_length = true,
                       .lengths = {},
                       .length = 64,
                       .stored = {0, 64}});
    }
    EXPECT_EQ(table_.AdoptDiskEntries({found}), 2);
    (void)table_.batch().Next();  // (nothing to drop)
  }

  // A question about entry `id`'s tokens.
  JobId Ask(uint64_t id) {
    auto job = std::make_shared<JobTable::Job>();
    job->descriptor.prompt_ids.resize(64);
    std::iota(job->descriptor.prompt_ids.begin(), job->descriptor.prompt_ids.end(),
              static_cast<int32_t>(100 * id));
    job->descriptor.prompt_ids.insert(job->descriptor.prompt_ids.end(), {1, 2, 3});
    job->descriptor.max_new_tokens = 2;
    job->observer = observer_;
    StatusOr<JobId> added = table_.Add(job, 0);
    EXPECT_TRUE(added.ok()) << added.status().ToString();
    return added.ok() ? *added : 0;
  }

  int64_t host_bytes_ = 64 * 16;  // one entry
};

TEST_F(PromotionTest, ADiskHitWaitsForItsEntryToBeReadBackThenStartsFromIt) {
  const JobId job = Ask(5);
  EXPECT_EQ(table_.Find(job)->waits_for_read, 5u);
  EXPECT_TRUE(table_.batch().parked(job));
  PlannedStep step = table_.batch().Next();
  EXPECT_EQ(step.promotes, std::vector<uint64_t>{5});
  EXPECT_TRUE(step.starts.empty());
  // The host tier counts the entry from now on; it is still on disk until read back.
  EXPECT_EQ(table_.prefix_cache()->tier_of(5), CacheTier::kDisk);
  EXPECT_EQ(table_.prefix_cache()->stats().host_bytes_per_rank, 64 * 16);
  EXPECT_TRUE(table_.batch().Next().starts.empty());
  table_.NotePromotions(/*rank=*/1, std::vector<uint64_t>{5}, {});
  EXPECT_EQ(table_.prefix_cache()->tier_of(5), CacheTier::kHost);
  EXPECT_EQ(table_.prefix_cache()->stats().promotions, 1);
  EXPECT_EQ(table_.prefix_cache()->stats().disk_entries, 1);
  EXPECT_FALSE(table_.batch().parked(job));
  step = table_.batch().Next();
  ASSERT_EQ(step.starts.size(), 1u);
  EXPECT_EQ(step.starts[0].prefix_from, 5u);
  EXPECT_EQ(step.starts[0].prefix_tokens, 64);
  // A second hit on the entry, now in host memory, waits for nothing.
  const JobId again = Ask(5);
  EXPECT_EQ(table_.Find(again)->waits_for_read, 0u);
  EXPECT_FALSE(table_.batch().parked(again));
}

TEST_F(PromotionTest, AnEntryAWorkerCannotReadIsDroppedAndItsJobRunsUncached) {
  const JobId job = Ask(6);
  EXPECT_EQ(table_.batch().Next().promotes, std::vector<uint64_t>{6});
  // Reports of entries nobody waits for are ignored.
  table_.NotePromotions(/*rank=*/1, std::vector<uint64_t>{9}, std::vector<uint64_t>{8});
  EXPECT_TRUE(table_.batch().parked(job));
  table_.NotePromotions(/*rank=*/1, {}, std::vector<uint64_t>{6});
  EXPECT_FALSE(table_.batch().parked(job));
  EXPECT_EQ(table_.Find(job)->cached_tokens, 0);
  EXPECT_FALSE(table_.prefix_cache()->index().Contains(6));
  EXPECT_EQ(table_.prefix_cache()->stats().host_bytes_per_rank, 0);
  const PlannedStep step = table_.batch().Next();
  EXPECT_EQ(step.drops, std::vector<uint64_t>{6});
  ASSERT_EQ(step.starts.size(), 1u);
  EXPECT_EQ(step.starts[0].prefix_from, 0u);
}

TEST_F(PromotionTest, AJobCancelledWhileItsEntryIsReadLeavesTheEntryToMoveUp) {
  const JobId job = Ask(5);
  (void)table_.batch().Next();
  EndCancelled(job);
  table_.NotePromotions(/*rank=*/1, std::vector<uint64_t>{5}, {});
  EXPECT_EQ(table_.prefix_cache()->tier_of(5), CacheTier::kHost);
  EXPECT_TRUE(table_.jobs().empty());
}

}  // namespace
}  // namespace millipede
