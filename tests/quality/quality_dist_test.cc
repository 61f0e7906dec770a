// Run under mpirun with N ranks: the retrieval tasks sharded over N ranks (context parallel
// prefill, decode with K/V spread over the ranks) give the answers of one process, and they are
// right.
#include <gtest/gtest.h>

#include "quality_test_util.h"
#include "worker/dist/mpi_communicator.h"
#include "worker/engine/engine.h"

namespace millipede {
namespace {

using testing::MustMakeTask;
using testing::RetrievalModelDir;

// Every rank writes the model to its own folder: ranks share no state but MPI.
std::unique_ptr<Engine> MakeEngine(bool distributed) {
  EngineOptions o;
  o.model_path = RetrievalModelDir(DType::kBF16);
  o.kv_dtype = DType::kBF16;
  o.prefill_chunk = 128;  // several chunks per rank
  std::unique_ptr<Communicator> comm;
  if (distributed) {
    auto c = CreateMpiCommunicator(MPI_COMM_WORLD);
    EXPECT_TRUE(c.ok());
    comm = std::move(c).value();
  }
  auto e = Engine::Create(o, std::move(comm));
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return std::move(e).value();
}

TEST(QualityDistTest, NRanksAnswerLikeOne) {
  auto distributed = MakeEngine(true);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // One process's answers, computed on rank 0 (the others have the same model and prompts).
  std::unique_ptr<Engine> local = rank == 0 ? MakeEngine(false) : nullptr;
  std::vector<TaskSpec> specs;
  for (auto [length, depth] : {std::pair<int64_t, double>{5, 0.5}, {300, 0.0}, {300, 1.0},
                               {700, 0.5}}) {
    TaskSpec s;
    s.context_tokens = length;
    s.depth = depth;
    specs.push_back(s);
  }
  TaskSpec kv;
  kv.kind = TaskKind::kKvRetrieval;
  kv.context_tokens = 700;
  kv.num_pairs = 24;
  specs.push_back(kv);
  TaskSpec chain;
  chain.kind = TaskKind::kChain;
  chain.context_tokens = 1000;
  chain.hops = 8;
  chain.distractors = 10;
  specs.push_back(chain);
  TaskSpec control = specs[1];
  control.control = TaskControl::kRemoveNeedle;
  specs.push_back(control);
  for (const TaskSpec& spec : specs) {
    const QualityTask task = MustMakeTask(spec);
    auto d = RunTask(*distributed, task);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    if (local) {
      auto l = RunTask(*local, task);
      ASSERT_TRUE(l.ok()) << l.status().ToString();
      EXPECT_EQ(d->output, l->output) << TaskKindName(spec.kind) << " " << spec.context_tokens;
    }
    EXPECT_EQ(d->correct, spec.control == TaskControl::kNone)
        << TaskKindName(spec.kind) << " " << spec.context_tokens << " depth " << spec.depth;
  }
}

}  // namespace
}  // namespace millipede
