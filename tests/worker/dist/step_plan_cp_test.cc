// Step plans over several sequences and chunked prefill, on one process and under mpirun with N
// ranks (every rank runs the same plans): two sequences interleaved in one engine — prefills,
// decode tokens of both in one step, a prefill chunk beside a decode token — give what each gives
// alone, so do five decoding together (batched decode attention, merged across ranks in runs),
// and a prompt prefilled in chunks (each chunk sharded over the ranks) gives what it gives in one
// step. Logits within 1e-5 relative in fp32; greedy tokens identical.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "../engine_test_util.h"
#include "worker/dist/mpi_communicator.h"

namespace millipede {
namespace {

using testing::MaxRelError;
using testing::RandomEngineOptions;
using testing::RandomIds;
using testing::SmallConfig;

std::unique_ptr<Engine> MakeEngine(int64_t chunk = 16) {
  auto comm = CreateMpiCommunicator(MPI_COMM_WORLD);
  EXPECT_TRUE(comm.ok());
  auto e = Engine::Create(RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF32, chunk),
                          std::move(comm).value());
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return std::move(e).value();
}

// One sequence's view of the steps: logits of each step, on every rank.
struct Trace {
  std::vector<std::vector<float>> logits;
  std::vector<int32_t> greedy;  // argmax of each step's logits
  PrefillDensity density;       // after the last prefill chunk
};

int32_t Argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Copies an entry's logits to the host on every rank (`owner` holds them after a prefill chunk).
void Record(Engine& e, const std::optional<ConstTensorView>& logits, int owner, Trace* t) {
  const int64_t vocab = e.config().vocab_size;
  std::vector<float> host(static_cast<size_t>(vocab));
  if (logits.has_value())
    ASSERT_TRUE(e.backend().CopyToHost(*logits, {host.data(), DType::kF32, Shape{vocab}}).ok());
  if (owner >= 0)
    ASSERT_TRUE(e.comm().HostBroadcast(host.data(), host.size() * sizeof(float), owner).ok());
  t->logits.push_back(host);
  t->greedy.push_back(Argmax(host));
}

// The rank holding the last position of a chunk of `count` tokens.
int ChunkOwner(int64_t count, int ranks) {
  return ShardPlan::Create(count, ranks)->RankOfPromptPosition(count - 1);
}

// Prefills `prompt` of sequence `id` in chunks of `chunk` tokens, then decodes `steps` greedy
// tokens, each step a plan of its own; `spare` more positions of capacity.
Trace RunAlone(Engine& e, SequenceId id, const std::vector<int32_t>& prompt, int64_t chunk,
               int steps, int64_t spare = 0) {
  Trace t;
  const int ranks = e.comm().size(), rank = e.comm().rank();
  const int64_t n = static_cast<int64_t>(prompt.size());
  EXPECT_TRUE(e.StartSequence(id, {n + steps + spare, chunk, e.policy()}).ok());
  for (int64_t begin = 0; begin < n; begin += chunk) {
    const int64_t count = std::min(chunk, n - begin);
    auto step = ShardedPrefill(id, begin, std::span(prompt).subspan(begin, count), rank, ranks);
    auto out = e.RunStep(StepPlan{{*step}});
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    if (!out.ok()) return t;
    EXPECT_EQ(out->prefill.size(), 1u);
    if (!out->prefill.empty()) t.density = out->prefill[0];
    if (begin + count == n) Record(e, out->logits[0], ChunkOwner(count, ranks), &t);
  }
  for (int i = 0; i < steps; ++i) {
    auto out = e.RunStep(StepPlan{{DecodeStep(id, t.greedy.back())}});
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    if (!out.ok()) return t;
    Record(e, out->logits[0], -1, &t);
  }
  e.EndSequence(id);
  return t;
}

void ExpectSame(const Trace& a, const Trace& b, const char* what) {
  ASSERT_EQ(a.logits.size(), b.logits.size()) << what;
  EXPECT_EQ(a.greedy, b.greedy) << what;
  for (size_t i = 0; i < a.logits.size(); ++i)
    EXPECT_LT(MaxRelError(a.logits[i], b.logits[i]), 1e-5) << what << ", step " << i;
}

TEST(StepPlanTest, TwoSequencesInterleavedEqualEachAlone) {
  auto engine = MakeEngine();
  Engine& e = *engine;
  const int ranks = e.comm().size(), rank = e.comm().rank();
  const std::vector<int32_t> a = RandomIds(37, 97, 1), b = RandomIds(53, 97, 2);
  const Trace alone_a = RunAlone(e, 1, a, 37, 4), alone_b = RunAlone(e, 2, b, 53, 4);
  ASSERT_FALSE(HasFailure());
  Trace ta, tb;
  ASSERT_TRUE(e.StartSequence(1, {41, 37, e.policy()}).ok());
  ASSERT_TRUE(e.StartSequence(2, {57, 53, e.policy()}).ok());
  EXPECT_EQ(e.num_sequences(), 2);
  // A's prompt alone; then B's prompt beside A's first decode token; then both decode together.
  auto out = e.RunStep({{*ShardedPrefill(1, 0, a, rank, ranks)}});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  Record(e, out->logits[0], ChunkOwner(37, ranks), &ta);
  out = e.RunStep({{*ShardedPrefill(2, 0, b, rank, ranks), DecodeStep(1, ta.greedy.back())}});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  Record(e, out->logits[0], ChunkOwner(53, ranks), &tb);
  Record(e, out->logits[1], -1, &ta);
  for (int i = 0; i < 3; ++i) {
    out = e.RunStep({{DecodeStep(2, tb.greedy.back()), DecodeStep(1, ta.greedy.back())}});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    Record(e, out->logits[0], -1, &tb);
    Record(e, out->logits[1], -1, &ta);
  }
  // B's last token alone, after A has ended: its KV is untouched by A's.
  e.EndSequence(1);
  out = e.RunStep({{DecodeStep(2, tb.greedy.back())}});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  Record(e, out->logits[0], -1, &tb);
  e.EndSequence(2);
  EXPECT_EQ(e.num_sequences(), 0);
  ExpectSame(ta, alone_a, "sequence A");
  ExpectSame(tb, alone_b, "sequence B");
}

// Five sequences of different lengths prefilled in one step, then decoding together: each
// layer's decode tokens attend in batched calls, and with two rows per attention call a merge
// across ranks takes them two by two (runs of 2, 2 and 1). So under every decode role that
// batches: dense, OmniKV's filter and selected layers (each rank's share of the global top-k),
// static eviction and DuoAttention's layers with a store per group of KV heads.
TEST(StepPlanTest, ManyDecodeTokensInOneStepEqualEachAlone) {
  auto engine = MakeEngine(2);
  Engine& e = *engine;
  const int ranks = e.comm().size(), rank = e.comm().rank();
  const std::vector<int64_t> lengths = {7, 19, 3, 30, 12};
  const int steps = 3;
  const int64_t spare = 200;  // DuoAttention's stores split only in sequences this long
  const AttentionPolicy dense = e.policy();
  const std::vector<std::string> policies = {
      "",
      R"({"version": 1, "filter": {"top_k": 4},
          "layers": [{"layer": 0, "decode": "filter"}, {"layer": 1, "decode": "selected"}]})",
      R"({"version": 1, "default": {"decode": "static-eviction"},
          "static_eviction": {"keep_tokens": 3, "recent_tokens": 2, "observed_queries": 4}})",
      R"({"version": 1,
          "default": {"prefill": ["a-shape", "dense"], "decode": ["streaming-head", "full"]},
          "a_shape": {"sink_tokens": 2, "window_tokens": 5},
          "streaming_head": {"sink_tokens": 2, "window_tokens": 6}})"};
  for (const std::string& policy : policies) {
    SCOPED_TRACE(policy.empty() ? "dense" : policy);
    ASSERT_TRUE(e.SetPolicy(policy.empty() ? dense : testing::PolicyFor(e, policy)).ok());
    std::vector<std::vector<int32_t>> prompts;
    std::vector<Trace> alone, together(lengths.size());
    for (size_t i = 0; i < lengths.size(); ++i) {
      prompts.push_back(RandomIds(lengths[i], 97, 10 + i));
      alone.push_back(
          RunAlone(e, static_cast<SequenceId>(i + 1), prompts[i], lengths[i], steps, spare));
    }
    ASSERT_FALSE(HasFailure());
    StepPlan prefill;
    for (size_t i = 0; i < lengths.size(); ++i) {
      const SequenceId id = static_cast<SequenceId>(i + 1);
      ASSERT_TRUE(e.StartSequence(id, {lengths[i] + steps + spare, lengths[i], e.policy()}).ok());
      prefill.steps.push_back(*ShardedPrefill(id, 0, prompts[i], rank, ranks));
    }
    auto out = e.RunStep(prefill);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    for (size_t i = 0; i < lengths.size(); ++i)
      Record(e, out->logits[i], ChunkOwner(lengths[i], ranks), &together[i]);
    for (int s = 0; s < steps; ++s) {
      StepPlan decode;
      for (size_t i = 0; i < lengths.size(); ++i)
        decode.steps.push_back(
            DecodeStep(static_cast<SequenceId>(i + 1), together[i].greedy.back()));
      out = e.RunStep(decode);
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      for (size_t i = 0; i < lengths.size(); ++i) Record(e, out->logits[i], -1, &together[i]);
    }
    for (size_t i = 0; i < lengths.size(); ++i) {
      e.EndSequence(static_cast<SequenceId>(i + 1));
      ExpectSame(together[i], alone[i], ("sequence " + std::to_string(i + 1)).c_str());
    }
  }
}

TEST(StepPlanTest, ChunkedPrefillEqualsOneStep) {
  auto engine = MakeEngine();
  const std::vector<int32_t> prompt = RandomIds(150, 97, 3);
  const Trace whole = RunAlone(*engine, 5, prompt, 150, 3);
  for (int64_t chunk : {4, 23, 64}) {
    const Trace chunked = RunAlone(*engine, 5, prompt, chunk, 3);
    ExpectSame(chunked, whole, ("chunks of " + std::to_string(chunk)).c_str());
  }
}

TEST(StepPlanTest, ChunkedAShapePrefillEqualsOneStep) {
  // Windows narrower than a chunk and than a shard: the mask is by global position, so chunks
  // and ring blocks compose exactly.
  auto engine = MakeEngine();
  const AttentionPolicy policy = testing::PolicyFor(*engine, R"({"version": 1,
      "default": {"prefill": "a-shape"}, "a_shape": {"sink_tokens": 3, "window_tokens": 20}})");
  ASSERT_TRUE(engine->SetPolicy(policy).ok());
  const std::vector<int32_t> prompt = RandomIds(120, 97, 4);
  const Trace whole = RunAlone(*engine, 6, prompt, 120, 2);
  ExpectSame(RunAlone(*engine, 6, prompt, 31, 2), whole, "chunks of 31");
}

// Sum over positions p < n of the keys k <= p a head with `sink` sinks and window `window` sees
// (window 0: every key), counted key by key.
int64_t BruteForcePairs(int64_t n, int64_t sink, int64_t window) {
  int64_t pairs = 0;
  for (int64_t p = 0; p < n; ++p)
    for (int64_t k = 0; k <= p; ++k) pairs += window == 0 || k < sink || p - k < window;
  return pairs;
}

// The prefill's attended pairs (the achieved density's numerator, over every rank) and the causal
// pairs: dense equals causal; A-shape is the window's count key by key; sparse policies compute
// what one process computes, fewer pairs than dense (or all of them when their budget covers
// every key); chunking changes none of it.
TEST(StepPlanTest, PrefillDensityIsThatOfOneProcess) {
  auto engine = MakeEngine();
  auto local = Engine::Create(RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF32, 16));
  ASSERT_TRUE(local.ok());
  const ModelConfig& c = engine->config();
  const int64_t heads = c.num_hidden_layers * c.num_key_value_heads;
  const std::vector<int32_t> prompt = RandomIds(300, 97, 7);
  const int64_t n = static_cast<int64_t>(prompt.size());
  const Trace dense = RunAlone(*engine, 3, prompt, 300, 0);
  EXPECT_EQ(dense.density.causal_pairs, heads * n * (n + 1) / 2);
  EXPECT_EQ(dense.density.attended_pairs, dense.density.causal_pairs);
  ASSERT_TRUE(engine->SetPolicy(testing::PolicyFor(*engine, R"({"version": 1,
      "layers": [{"layer": 0, "prefill": ["a-shape", "dense"]}],
      "a_shape": {"sink_tokens": 3, "window_tokens": 20}})"))
                  .ok());
  for (int64_t chunk : {300, 70}) {
    const Trace a_shape = RunAlone(*engine, 3, prompt, chunk, 0);
    EXPECT_EQ(a_shape.density.causal_pairs, dense.density.causal_pairs);
    EXPECT_EQ(a_shape.density.attended_pairs,
              (heads - 1) * BruteForcePairs(n, 0, 0) + BruteForcePairs(n, 3, 20))
        << "chunks of " << chunk;
  }
  for (const char* fields : {
           R"("default": {"prefill": "vertical-slash"},
              "vertical_slash": {"last_queries": 16, "vertical": 12, "slash": 24})",
           R"("default": {"prefill": ["block-sparse", "a-shape"]},
              "a_shape": {"sink_tokens": 3, "window_tokens": 40},
              "block_sparse": {"block": 32, "top_blocks": 3})",
           R"("default": {"prefill": "vertical-slash"},
              "vertical_slash": {"last_queries": 16, "vertical": 400, "slash": 400})"}) {
    SCOPED_TRACE(fields);
    const std::string json = std::string(R"({"version": 1, )") + fields + "}";
    ASSERT_TRUE(engine->SetPolicy(testing::PolicyFor(*engine, json)).ok());
    ASSERT_TRUE((*local)->SetPolicy(testing::PolicyFor(**local, json)).ok());
    const Trace dist = RunAlone(*engine, 4, prompt, 300, 0);
    const Trace one = RunAlone(**local, 4, prompt, 300, 0);
    EXPECT_EQ(dist.density.attended_pairs, one.density.attended_pairs);
    EXPECT_EQ(dist.density.causal_pairs, dense.density.causal_pairs);
    const bool covers_all = std::string(fields).find("400") != std::string::npos;
    if (covers_all) {
      EXPECT_EQ(dist.density.attended_pairs, dense.density.causal_pairs);
    } else {
      EXPECT_LT(dist.density.attended_pairs, dense.density.causal_pairs);
      EXPECT_GT(dist.density.attended_pairs, 0);
    }
  }
}

TEST(StepPlanTest, BadPlansFailOnEveryRankAndLoseNothing) {
  auto engine = MakeEngine();
  Engine& e = *engine;
  const int ranks = e.comm().size(), rank = e.comm().rank();
  const std::vector<int32_t> a = RandomIds(20, 97, 8);
  ASSERT_TRUE(e.StartSequence(1, {30, 20, e.policy()}).ok());
  // Unknown sequence, a sequence twice, an out-of-vocabulary id on the last rank only.
  EXPECT_FALSE(e.RunStep({{DecodeStep(9, 1)}}).ok());
  EXPECT_FALSE(e.RunStep({{*ShardedPrefill(1, 0, a, rank, ranks),
                           *ShardedPrefill(1, 0, a, rank, ranks)}}).ok());
  SequenceStep bad = *ShardedPrefill(1, 0, a, rank, ranks);
  if (rank == ranks - 1 && !bad.ids.empty()) bad.ids[0] = 1000;
  if (ranks > 1 || !bad.ids.empty()) EXPECT_FALSE(e.RunStep({{bad}}).ok());
  // The sequence is as it was: the prompt still runs.
  EXPECT_EQ(e.sequence(1)->length(), 0);
  auto out = e.RunStep({{*ShardedPrefill(1, 0, a, rank, ranks)}});
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(e.sequence(1)->length(), 20);
  e.EndSequence(1);
}

}  // namespace
}  // namespace millipede
