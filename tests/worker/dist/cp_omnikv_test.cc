// Run under mpirun with N ranks: OmniKV's filter and selected layers over N ranks must give the
// results of one process. Each rank chooses among its own context rows, the cut agreed over all
// ranks on the backend (TopKKeys, the all-gather, TopKCut), and attends to its share; only the
// keys and (o, lse) partials cross ranks. Logits within 1e-5 relative in fp32 at every decode
// step, the same greedy and sampled tokens, in the device tier and the host tier (and the host
// tier with an FP8 cache).
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "../engine_test_util.h"
#include "tests/worker/engine/single_sequence.h"
#include "worker/dist/mpi_communicator.h"
#include "worker/generate.h"

namespace millipede {
namespace {

using testing::MaxRelError;
using testing::RandomIds;

ModelConfig EightLayers() {
  ModelConfig c = testing::SmallConfig();
  c.num_hidden_layers = 8;
  return c;
}

// The selected layers' tier and the KV dtype (FP8 E4M3: quantised as written in every store,
// the host tier's gathers moving bytes).
using Param = std::tuple<SelectedKvTier, DType>;

EngineOptions Options(const Param& param) {
  const auto [tier, kv_dtype] = param;
  EngineOptions o = testing::RandomEngineOptions(EightLayers(), DType::kF32, kv_dtype, 32);
  o.selected_kv = tier;
  return o;
}

std::unique_ptr<Engine> MakeDistributed(const Param& param) {
  auto comm = CreateMpiCommunicator(MPI_COMM_WORLD);
  EXPECT_TRUE(comm.ok());
  auto e = Engine::Create(Options(param), std::move(comm).value());
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return std::move(e).value();
}

AttentionPolicy OmniPolicy(const Engine& e, int64_t top_k) {
  return testing::PolicyFor(e,
                            R"({"version": 1, "filter": {"top_k": )" + std::to_string(top_k) + R"(},
      "layers": [{"layer": 1, "decode": "filter"}, {"layer": 2, "decode": "selected"},
                 {"layer": 3, "decode": "selected"}, {"layer": 4, "decode": "selected"},
                 {"layer": 5, "decode": "filter"}, {"layer": 6, "decode": "selected"},
                 {"layer": 7, "decode": "selected"}]})");
}

// Each decode step's logits (every rank has them) after a prompt sharded as Generate shards it.
std::vector<std::vector<float>> DecodeLogits(Engine& e, const AttentionPolicy& policy,
                                             const std::vector<int32_t>& prompt,
                                             const std::vector<int32_t>& decode) {
  Communicator& comm = e.comm();
  auto step = ShardedPrefill(testing::kSingleSequence, 0, prompt, comm.rank(), comm.size());
  EXPECT_TRUE(step.ok());
  const int64_t decode_rows = (static_cast<int64_t>(decode.size()) + comm.size() - 1) / comm.size();
  Status started = testing::StartSequence(e, static_cast<int64_t>(step->ids.size()) + decode_rows,
                                          0, policy, decode_rows);
  EXPECT_TRUE(started.ok()) << started.ToString();
  EXPECT_TRUE(testing::ForwardShard(e, step->ranges, step->ids).ok());
  std::vector<std::vector<float>> out;
  const int64_t vocab = e.config().vocab_size;
  for (int32_t id : decode) {
    auto d = testing::ForwardDecode(e, id);
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    if (!d.ok()) break;
    out.emplace_back(static_cast<size_t>(vocab));
    EXPECT_TRUE(e.backend().CopyToHost(*d, {out.back().data(), DType::kF32, Shape{vocab}}).ok());
  }
  testing::EndSequence(e);
  return out;
}

class CpOmniKvTest : public ::testing::TestWithParam<Param> {};

TEST_P(CpOmniKvTest, LogitsMatchSingleProcess) {
  const std::vector<int32_t> prompt = RandomIds(333, 97, 41), decode = RandomIds(6, 97, 42);
  auto engine = MakeDistributed(GetParam());
  auto local = Engine::Create(Options(GetParam()));
  ASSERT_TRUE(local.ok());
  // A budget smaller than any rank's share, one larger than some, one covering the prompt.
  for (int64_t top_k : {5, 100, 333}) {
    const auto dist = DecodeLogits(*engine, OmniPolicy(*engine, top_k), prompt, decode);
    const auto one = DecodeLogits(**local, OmniPolicy(**local, top_k), prompt, decode);
    ASSERT_EQ(dist.size(), one.size());
    for (size_t i = 0; i < one.size(); ++i)
      EXPECT_LT(MaxRelError(dist[i], one[i]), 1e-5) << "top_k " << top_k << " step " << i;
  }
}

TEST_P(CpOmniKvTest, TokensMatchSingleProcess) {
  auto engine = MakeDistributed(GetParam());
  auto local = Engine::Create(Options(GetParam()));
  ASSERT_TRUE(local.ok());
  GenerationRequest r;
  r.prompt_ids = RandomIds(301, 97, 43);
  r.max_new_tokens = 10;
  r.ignore_eos = true;
  r.policy = OmniPolicy(**local, 12);
  auto dist = Generate(*engine, r);
  auto one = Generate(**local, r);
  ASSERT_TRUE(dist.ok() && one.ok()) << dist.status().ToString() << one.status().ToString();
  EXPECT_EQ(dist->ids, one->ids);
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 8;
  dist = Generate(*engine, r);
  one = Generate(**local, r);
  ASSERT_TRUE(dist.ok() && one.ok());
  EXPECT_EQ(dist->ids, one->ids);
  r.policy.reset();
  auto dense = Generate(**local, r);
  ASSERT_TRUE(dense.ok());
  EXPECT_NE(dense->ids, one->ids);  // the budget changed the answer
}

INSTANTIATE_TEST_SUITE_P(Tiers, CpOmniKvTest,
                         ::testing::Values(Param{SelectedKvTier::kDevice, DType::kF32},
                                           Param{SelectedKvTier::kHost, DType::kF32},
                                           Param{SelectedKvTier::kHost, DType::kF8E4M3}),
                         [](const auto& info) {
                           return std::string(SelectedKvTierName(std::get<0>(info.param))) + "_" +
                                  DTypeName(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace millipede
