// JobTable: cancelling is idempotent (a job that already ended is left as it is; only ids never
// issued are NotFound) and the ended jobs' final status is kept for a bounded number of them.
#include "coordinator/job_table.h"

#include <gtest/gtest.h>

#include <string>

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
  JobTableTest() : table_(MakeBatch(), /*metrics=*/nullptr) {}

  static StepScheduler MakeBatch() {
    return std::move(StepScheduler::Create({.kv_positions_per_rank = 1 << 20})).value();
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

}  // namespace
}  // namespace millipede
