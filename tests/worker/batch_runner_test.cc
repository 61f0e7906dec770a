// BatchRunner: many jobs in one engine, one process and under mpirun (every rank runs the same
// plans). Jobs that arrive at different steps, with prompts prefilled in chunks beside other
// jobs' decode tokens and their own sampling settings, give exactly the tokens (and
// log-probabilities) Generate gives each alone; a job ended mid-batch frees exactly its KV; a
// start the engine refuses and malformed entries fail only their job.
#include "worker/batch_runner.h"

#include <gtest/gtest.h>

#include <map>

#include "engine_test_util.h"
#include "worker/dist/mpi_communicator.h"
#include "worker/generate.h"

namespace millipede {
namespace {

using control::StepEntryKind;
using control::StepOutcome;
using testing::RandomEngineOptions;
using testing::RandomIds;
using testing::SmallConfig;

std::unique_ptr<Engine> MakeEngine() {
  auto comm = CreateMpiCommunicator(MPI_COMM_WORLD);
  EXPECT_TRUE(comm.ok());
  auto e = Engine::Create(RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF32, 16),
                          std::move(comm).value());
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return std::move(e).value();
}

control::JobDescriptor Job(uint64_t id, int64_t prompt, int64_t max_new, uint32_t seed) {
  control::JobDescriptor d;
  d.job_id = id;
  d.prompt_ids = RandomIds(prompt, 97, seed);
  d.max_new_tokens = max_new;
  d.ignore_eos = true;
  return d;
}

std::vector<control::JobDescriptor> Jobs() {
  std::vector<control::JobDescriptor> jobs = {Job(1, 40, 6, 1), Job(2, 23, 5, 2), Job(3, 57, 4, 3),
                                              Job(4, 30, 8, 4)};
  jobs[1].sampling.temperature = 0.8f;
  jobs[1].sampling.seed = 3;
  jobs[1].sampling.repetition_penalty = 1.2f;
  jobs[2].sampling.temperature = 1.0f;
  jobs[2].sampling.top_k = 5;
  jobs[2].sampling.seed = 9;
  jobs[2].sampling.logprobs = 3;
  jobs[3].stop_ids = {7};
  jobs[3].ignore_eos = false;
  return jobs;
}

// Generate's answer for one job alone.
GenerationResult Alone(Engine& e, const control::JobDescriptor& d,
                       std::vector<SampledToken>* tokens) {
  GenerationRequest r{.prompt_ids = d.prompt_ids,
                      .max_new_tokens = d.max_new_tokens,
                      .sampling = d.sampling,
                      .stop_ids = d.stop_ids,
                      .ignore_eos = d.ignore_eos};
  auto result = Generate(e, r, [&](const SampledToken& t) {
    tokens->push_back(t);
    return true;
  });
  EXPECT_TRUE(result.ok()) << result.status().ToString();
  return *result;
}

control::StepStart Start(const control::JobDescriptor& d) {
  return {d, static_cast<int64_t>(d.prompt_ids.size()) + d.max_new_tokens, 256};
}

// What the jobs got from the runner.
struct Seen {
  std::map<uint64_t, std::vector<control::StepJobResult>> tokens;
  std::map<uint64_t, bool> finished;
};

void Apply(const control::StepDone& done, Seen* seen) {
  EXPECT_EQ(done.status_code, 0) << done.message;
  for (const control::StepJobResult& r : done.jobs) {
    EXPECT_NE(r.outcome, StepOutcome::kFailed) << r.job_id << ": " << r.message;
    if (r.outcome != StepOutcome::kToken) continue;
    seen->tokens[r.job_id].push_back(r);
    if (r.finished) seen->finished[r.job_id] = true;
  }
}

TEST(BatchRunnerTest, JobsInOneBatchGetWhatEachGetsAlone) {
  std::unique_ptr<Engine> engine = MakeEngine();
  const std::vector<control::JobDescriptor> jobs = Jobs();
  std::map<uint64_t, std::vector<SampledToken>> alone;
  for (const auto& d : jobs) Alone(*engine, d, &alone[d.job_id]);
  ASSERT_EQ(engine->num_sequences(), 0);

  BatchRunner runner(*engine);
  Seen seen;
  auto run = [&](control::StepPlan plan) {
    auto done = runner.Run(plan);
    ASSERT_TRUE(done.ok()) << done.status().ToString();
    Apply(*done, &seen);
  };
  // Chunks are multiples of 12 (twice 1, 2 and 3 ranks) except a prompt's last.
  run({1,
       {},
       {Start(jobs[0]), Start(jobs[1])},
       {{1, StepEntryKind::kPrefill, 0, 40}, {2, StepEntryKind::kPrefill, 0, 12}}});
  run({2,
       {},
       {Start(jobs[2]), Start(jobs[3])},
       {{1, StepEntryKind::kDecode, 40, 1},
        {2, StepEntryKind::kPrefill, 12, 11},
        {3, StepEntryKind::kPrefill, 0, 24},
        {4, StepEntryKind::kPrefill, 0, 30}}});
  run({3,
       {},
       {},
       {{3, StepEntryKind::kPrefill, 24, 33},
        {1, StepEntryKind::kDecode, 41, 1},
        {2, StepEntryKind::kDecode, 23, 1},
        {4, StepEntryKind::kDecode, 30, 1}}});
  // Job 4 is cancelled with two tokens: the next plan frees it, and only it.
  ASSERT_EQ(seen.tokens[4].size(), 2u);
  const int64_t kv4 = engine->sequence(4)->KvBytes();
  const int64_t before = engine->KvBytes();
  for (uint64_t step = 4; runner.running() > 0 || step == 4; ++step) {
    control::StepPlan plan{step, {}, {}, {}};
    if (step == 4) plan.ends = {4};
    for (const auto& d : jobs)
      if (d.job_id != 4 && !seen.finished[d.job_id] && engine->sequence(d.job_id))
        plan.entries.push_back({d.job_id, StepEntryKind::kDecode, 0, 1});
    run(plan);
    if (step == 4) {
      EXPECT_EQ(engine->sequence(4), nullptr);
      int64_t rest = 0;
      for (uint64_t id : {1, 2, 3})
        if (engine->sequence(id)) rest += engine->sequence(id)->KvBytes();
      EXPECT_EQ(engine->KvBytes(), rest);
      EXPECT_LE(engine->KvBytes(), before - kv4);
    }
  }
  for (uint64_t id : {1, 2, 3}) {
    const std::vector<SampledToken>& want = alone[id];
    const auto& got = seen.tokens[id];
    ASSERT_EQ(got.size(), want.size()) << "job " << id;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i].token, want[i].id) << "job " << id << " token " << i;
      EXPECT_NEAR(got[i].logprob, want[i].logprob, 1e-5);
      ASSERT_EQ(got[i].top_ids.size(), want[i].top.size());
      for (size_t k = 0; k < want[i].top.size(); ++k) {
        EXPECT_EQ(got[i].top_ids[k], want[i].top[k].id);
        EXPECT_NEAR(got[i].top_logprobs[k], want[i].top[k].logprob, 1e-5);
      }
    }
    EXPECT_TRUE(seen.finished[id]);
  }
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(seen.tokens[4][i].token, alone[4][i].id);
  EXPECT_EQ(engine->num_sequences(), 0);
  EXPECT_EQ(engine->KvBytes(), 0);
}

TEST(BatchRunnerTest, FailuresStayWithTheirJob) {
  std::unique_ptr<Engine> engine = MakeEngine();
  const std::vector<control::JobDescriptor> jobs = Jobs();
  std::vector<SampledToken> alone;
  Alone(*engine, jobs[0], &alone);
  BatchRunner runner(*engine);
  control::StepStart huge = Start(jobs[1]);
  huge.capacity_per_rank = int64_t{1} << 40;  // beyond the context: refused at the start
  control::StepStart bad_sampling = Start(jobs[2]);
  bad_sampling.job.sampling.logit_bias = {{500, 1.0f}};  // outside the vocabulary
  control::StepPlan plan{1,
                         {},
                         {Start(jobs[0]), huge, bad_sampling},
                         {{1, StepEntryKind::kPrefill, 0, 40},
                          {2, StepEntryKind::kPrefill, 0, 23},
                          {3, StepEntryKind::kPrefill, 0, 57},
                          {9, StepEntryKind::kDecode, 0, 1}}};
  auto done = runner.Run(plan);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->status_code, 0);
  std::map<uint64_t, control::StepJobResult> by_job;
  for (const auto& r : done->jobs) by_job[r.job_id] = r;
  EXPECT_EQ(by_job[1].outcome, StepOutcome::kToken);
  EXPECT_EQ(by_job[1].token, alone[0].id);
  EXPECT_EQ(by_job[2].outcome, StepOutcome::kFailed);
  EXPECT_NE(by_job[2].message.find("capacity"), std::string::npos) << by_job[2].message;
  EXPECT_EQ(by_job[3].outcome, StepOutcome::kFailed);
  EXPECT_NE(by_job[3].message.find("logit_bias"), std::string::npos) << by_job[3].message;
  EXPECT_EQ(by_job[9].outcome, StepOutcome::kFailed);
  EXPECT_EQ(runner.running(), 1);
  // A chunk outside its prompt fails that job (and frees it); a decode beside it still runs.
  ASSERT_TRUE(runner.Run({2, {}, {Start(jobs[3])}, {{4, StepEntryKind::kPrefill, 10, 30}}}).ok());
  EXPECT_EQ(engine->sequence(4), nullptr);
  done = runner.Run({3, {}, {}, {{1, StepEntryKind::kDecode, 0, 1}}});
  ASSERT_TRUE(done.ok());
  ASSERT_EQ(done->jobs.size(), 1u);
  EXPECT_EQ(done->jobs[0].token, alone[1].id);
}

}  // namespace
}  // namespace millipede
