// Generate (offline, one job at a time) and the service's path (the coordinator's StepScheduler
// planning steps for jobs that arrive together: prompts prefilled in chunks within a step budget
// beside the other jobs' decode tokens, run by a BatchRunner as the workers run them) give every
// request the same tokens, log-probabilities, finish reason and prefill pairs: stop ids, EOS,
// the token budget, sampling with penalties. Under mpirun with 1 and 2 ranks; the tokens are also
// those of one process.
#include <gtest/gtest.h>

#include <map>

#include "control/messages.h"
#include "coordinator/step_scheduler.h"
#include "engine_test_util.h"
#include "worker/batch_runner.h"
#include "worker/dist/mpi_communicator.h"
#include "worker/generate.h"

namespace millipede {
namespace {

using control::JobDescriptor;
using control::StepEntryKind;
using control::StepJobResult;
using control::StepOutcome;
using testing::RandomEngineOptions;
using testing::RandomIds;
using testing::SmallConfig;

// The service's step budget: small, so that every prompt below is prefilled in chunks.
constexpr int64_t kMaxStepTokens = 24;

// An engine over every rank of the world (`distributed`) or this process alone.
std::unique_ptr<Engine> MakeEngine(const ModelConfig& c, bool distributed) {
  std::unique_ptr<Communicator> comm;
  if (distributed) {
    auto made = CreateMpiCommunicator(MPI_COMM_WORLD);
    EXPECT_TRUE(made.ok()) << made.status().ToString();
    if (made.ok()) comm = std::move(made).value();
  }
  auto e = Engine::Create(RandomEngineOptions(c, DType::kF32, DType::kF32, 16), std::move(comm));
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? std::move(e).value() : nullptr;
}

GenerationRequest RequestOf(const JobDescriptor& d) {
  return {.prompt_ids = d.prompt_ids,
          .max_new_tokens = d.max_new_tokens,
          .sampling = d.sampling,
          .stop_ids = d.stop_ids,
          .ignore_eos = d.ignore_eos,
          .policy = d.policy};
}

// Generate's answer for one job, and every token its callback saw.
GenerationResult Alone(Engine& e, const JobDescriptor& d, std::vector<SampledToken>* tokens) {
  auto result = Generate(e, RequestOf(d), [&](const SampledToken& t) {
    tokens->push_back(t);
    return true;
  });
  EXPECT_TRUE(result.ok()) << "job " << d.job_id << ": " << result.status().ToString();
  return result.ok() ? *result : GenerationResult{};
}

// The plan the coordinator sends for `planned` (as its Scheduler builds it).
control::StepPlan PlanOf(uint64_t step_id, const PlannedStep& planned,
                         const std::map<uint64_t, JobDescriptor>& jobs) {
  control::StepPlan plan{step_id, planned.ends, {}, {}};
  for (const PlannedStart& s : planned.starts)
    plan.starts.push_back({jobs.at(s.job), s.capacity_per_rank, kMaxStepTokens});
  for (const PlannedEntry& p : planned.entries) {
    const StepEntryKind kind =
        p.kind == PlannedKind::kPrefill ? StepEntryKind::kPrefill : StepEntryKind::kDecode;
    plan.entries.push_back({p.job, kind, p.begin, p.count});
  }
  return plan;
}

// What the service's path gives each job: its token results in order. The jobs arrive together;
// each leaves the scheduler when the workers report it finished. `chunks` counts the prefill
// chunks that did not end a prompt.
std::map<uint64_t, std::vector<StepJobResult>> Served(Engine& e,
                                                      const std::map<uint64_t, JobDescriptor>& jobs,
                                                      int64_t* chunks) {
  std::map<uint64_t, std::vector<StepJobResult>> out;
  auto scheduler = StepScheduler::Create({.num_ranks = e.comm().size(),
                                          .max_step_tokens = kMaxStepTokens,
                                          .max_running = 8,
                                          .kv_positions_per_rank = 4096,
                                          .min_chunk = 4});
  EXPECT_TRUE(scheduler.ok()) << scheduler.status().ToString();
  if (!scheduler.ok()) return out;
  for (const auto& [id, d] : jobs)
    EXPECT_TRUE(
        scheduler->Add(id, static_cast<int64_t>(d.prompt_ids.size()), d.max_new_tokens).ok());
  BatchRunner runner(e);
  for (uint64_t step_id = 1; step_id < 1000; ++step_id) {
    const PlannedStep planned = scheduler->Next();
    if (planned.empty()) break;
    StatusOr<control::StepDone> done = runner.Run(PlanOf(step_id, planned, jobs));
    EXPECT_TRUE(done.ok() && done->status_code == 0)
        << (done.ok() ? done->message : done.status().ToString());
    if (!done.ok() || done->status_code != 0) break;
    scheduler->Completed(planned);
    for (const StepJobResult& r : done->jobs) {
      EXPECT_NE(r.outcome, StepOutcome::kFailed) << "job " << r.job_id << ": " << r.message;
      if (r.outcome == StepOutcome::kPrefilled) ++*chunks;
      if (r.outcome == StepOutcome::kToken) out[r.job_id].push_back(r);
      if (r.outcome == StepOutcome::kFailed || r.finished) scheduler->Remove(r.job_id, true);
    }
  }
  EXPECT_EQ(runner.running(), 0);
  return out;
}

JobDescriptor Job(uint64_t id, int64_t prompt, int64_t max_new, uint32_t seed) {
  JobDescriptor d;
  d.job_id = id;
  d.prompt_ids = RandomIds(prompt, 97, seed);
  d.max_new_tokens = max_new;
  d.ignore_eos = true;
  return d;
}

// Requests that end every way a request ends: their token budget (greedy; sampled with penalties
// and log-probabilities), a stop id (job 3), an EOS id (job 4, on an engine whose EOS is `*eos`)
// and a budget of one token. The stop and EOS ids are tokens jobs 3 and 4 generate on `e` when
// nothing stops them.
std::map<uint64_t, JobDescriptor> Requests(Engine& e, int32_t* eos) {
  std::map<uint64_t, JobDescriptor> jobs;
  jobs[1] = Job(1, 40, 6, 1);
  jobs[2] = Job(2, 57, 9, 2);
  jobs[2].sampling = {.temperature = 0.9f,
                      .top_k = 8,
                      .seed = 3,
                      .repetition_penalty = 1.2f,
                      .presence_penalty = 0.5f,
                      .logprobs = 3};
  jobs[3] = Job(3, 33, 10, 3);
  jobs[3].sampling = {.temperature = 1.3f, .top_p = 0.9f, .seed = 5, .logprobs = 2};
  jobs[4] = Job(4, 29, 10, 4);
  jobs[4].sampling = {.temperature = 1.1f, .seed = 8, .frequency_penalty = 0.3f, .logprobs = 0};
  jobs[5] = Job(5, 18, 1, 5);
  jobs[5].ignore_eos = false;
  jobs[5].sampling.logprobs = 4;
  // The stop id and the EOS id: the fourth token of a free run.
  std::vector<SampledToken> free3, free4;
  const GenerationResult run3 = Alone(e, jobs[3], &free3);
  const GenerationResult run4 = Alone(e, jobs[4], &free4);
  if (run3.ids.size() < 4 || run4.ids.size() < 4) return jobs;
  jobs[3].stop_ids = {run3.ids[3]};
  *eos = run4.ids[3];
  jobs[4].ignore_eos = false;
  return jobs;
}

void ExpectSameToken(const SampledToken& want, const StepJobResult& got, const std::string& at) {
  EXPECT_EQ(got.token, want.id) << at;
  EXPECT_NEAR(got.logprob, want.logprob, 1e-5) << at;
  ASSERT_EQ(got.top_ids.size(), want.top.size()) << at;
  ASSERT_EQ(got.top_logprobs.size(), want.top.size()) << at;
  for (size_t k = 0; k < want.top.size(); ++k) {
    EXPECT_EQ(got.top_ids[k], want.top[k].id) << at;
    EXPECT_NEAR(got.top_logprobs[k], want.top[k].logprob, 1e-5) << at;
  }
}

TEST(GenerateSchedulerTest, GenerateGivesWhatTheServiceGives) {
  // The EOS id comes from a free run; an engine with the same weights then has it as its EOS.
  int32_t eos = -1;
  std::map<uint64_t, JobDescriptor> jobs;
  {
    std::unique_ptr<Engine> probe = MakeEngine(SmallConfig(), true);
    ASSERT_NE(probe, nullptr);
    jobs = Requests(*probe, &eos);
  }
  ASSERT_GE(eos, 0);
  ModelConfig c = SmallConfig();
  c.eos_token_ids = {eos};
  std::unique_ptr<Engine> engine = MakeEngine(c, true);
  ASSERT_NE(engine, nullptr);

  std::map<uint64_t, GenerationResult> alone;
  std::map<uint64_t, std::vector<SampledToken>> tokens;
  for (const auto& [id, d] : jobs) alone[id] = Alone(*engine, d, &tokens[id]);
  ASSERT_EQ(engine->num_sequences(), 0);
  // Every way of finishing is covered.
  EXPECT_EQ(alone[1].finish_reason, FinishReason::kLength);
  EXPECT_EQ(alone[2].finish_reason, FinishReason::kLength);
  EXPECT_EQ(alone[3].finish_reason, FinishReason::kStop);
  EXPECT_EQ(alone[3].ids.back(), jobs[3].stop_ids[0]);
  EXPECT_EQ(alone[4].finish_reason, FinishReason::kStop);
  EXPECT_EQ(alone[4].ids.back(), eos);
  EXPECT_EQ(alone[5].ids.size(), 1u);

  int64_t chunks = 0;
  std::map<uint64_t, std::vector<StepJobResult>> served = Served(*engine, jobs, &chunks);
  EXPECT_GT(chunks, 0) << "the service's path prefilled no prompt in chunks";
  EXPECT_EQ(engine->num_sequences(), 0);
  for (const auto& [id, result] : alone) {
    const std::vector<StepJobResult>& got = served[id];
    ASSERT_EQ(got.size(), result.ids.size()) << "job " << id;
    ASSERT_EQ(tokens[id].size(), result.ids.size()) << "job " << id;
    for (size_t i = 0; i < got.size(); ++i) {
      ExpectSameToken(tokens[id][i], got[i],
                      "job " + std::to_string(id) + " token " + std::to_string(i));
      EXPECT_EQ(got[i].finished, i + 1 == got.size()) << "job " << id << " token " << i;
    }
    EXPECT_EQ(got.back().finished_by_stop, result.finish_reason == FinishReason::kStop)
        << "job " << id;
    EXPECT_EQ(got[0].prefill_attended_pairs, result.prefill.attended_pairs) << "job " << id;
    EXPECT_EQ(got[0].prefill_causal_pairs, result.prefill.causal_pairs) << "job " << id;
  }

  // N ranks give the tokens of one process.
  std::unique_ptr<Engine> local = MakeEngine(c, false);
  ASSERT_NE(local, nullptr);
  for (const auto& [id, d] : jobs) {
    std::vector<SampledToken> unused;
    EXPECT_EQ(Alone(*local, d, &unused).ids, alone[id].ids) << "job " << id;
  }
}

}  // namespace
}  // namespace millipede
