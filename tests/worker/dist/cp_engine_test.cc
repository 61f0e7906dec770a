// Run under mpirun with N ranks: N ranks sharing one sequence must give the results of one
// process (logits within 1e-5 relative in fp32, identical greedy tokens).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "../engine_test_util.h"
#include "tests/worker/engine/single_sequence.h"
#include "worker/dist/mpi_communicator.h"
#include "worker/generate.h"

namespace millipede {
namespace {

using testing::MaxRelError;
using testing::RandomEngineOptions;
using testing::RandomIds;
using testing::SmallConfig;

int WorldRank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// An engine over every rank of the world.
std::unique_ptr<Engine> MakeDistributed(const EngineOptions& options) {
  auto comm = CreateMpiCommunicator(MPI_COMM_WORLD);
  EXPECT_TRUE(comm.ok());
  auto e = Engine::Create(options, std::move(comm).value());
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return std::move(e).value();
}

std::unique_ptr<Engine> MakeDistributed(int64_t chunk) {
  return MakeDistributed(RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF32, chunk));
}

// The logits of the last prompt position and of each decode step, from rank 0's view; `prefill`,
// when set, gets the prompt's attention pairs.
std::vector<std::vector<float>> DistributedLogits(Engine& e, const std::vector<int32_t>& prompt,
                                                  const std::vector<int32_t>& decode,
                                                  PrefillDensity* prefill = nullptr) {
  Communicator& comm = e.comm();
  auto plan = ShardPlan::Create(static_cast<int64_t>(prompt.size()), comm.size());
  EXPECT_TRUE(plan.ok());
  std::vector<TokenRange> ranges;
  std::vector<int32_t> ids;
  for (const TokenRange& r : plan->RankPromptRanges(comm.rank())) {
    if (r.empty()) continue;
    ranges.push_back(r);
    ids.insert(ids.end(), prompt.begin() + r.begin, prompt.begin() + r.end);
  }
  EXPECT_TRUE(testing::StartSequence(
                  e, plan->RankPromptTokens(comm.rank()) + 1 + static_cast<int64_t>(decode.size()))
                  .ok());
  const int64_t vocab = e.config().vocab_size;
  std::vector<std::vector<float>> out;
  std::vector<float> logits(static_cast<size_t>(vocab));
  auto step = testing::ForwardShard(e, ranges, ids, {}, prefill);
  EXPECT_TRUE(step.ok()) << step.status().ToString();
  const int owner = plan->RankOfPromptPosition(static_cast<int64_t>(prompt.size()) - 1);
  if (step.ok() && step->has_value()) {
    EXPECT_TRUE(e.backend().CopyToHost(**step, {logits.data(), DType::kF32, Shape{vocab}}).ok());
  }
  EXPECT_EQ(step.ok() && step->has_value(), comm.rank() == owner);
  EXPECT_TRUE(comm.HostBroadcast(logits.data(), logits.size() * sizeof(float), owner).ok());
  out.push_back(logits);
  for (int32_t id : decode) {
    auto d = testing::ForwardDecode(e, id);
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    if (!d.ok()) break;
    EXPECT_TRUE(e.backend().CopyToHost(*d, {logits.data(), DType::kF32, Shape{vocab}}).ok());
    out.push_back(logits);
  }
  testing::EndSequence(e);
  return out;
}

std::vector<std::vector<float>> LocalLogits(const std::vector<int32_t>& prompt,
                                            const std::vector<int32_t>& decode) {
  auto e = Engine::Create(RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF32));
  EXPECT_TRUE(e.ok());
  std::vector<std::vector<float>> out(1);
  EXPECT_TRUE(
      testing::StartSequence(**e, static_cast<int64_t>(prompt.size() + decode.size())).ok());
  EXPECT_TRUE(testing::ForwardToHost(**e, prompt, &out[0]).ok());
  for (int32_t id : decode) {
    out.emplace_back();
    const int32_t one[1] = {id};
    EXPECT_TRUE(testing::ForwardToHost(**e, one, &out.back()).ok());
  }
  return out;
}

class CpEngineTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(CpEngineTest, MatchesSingleProcess) {
  const int64_t length = GetParam();
  const std::vector<int32_t> prompt = RandomIds(length, 97, static_cast<uint32_t>(length));
  const std::vector<int32_t> decode = RandomIds(5, 97, 77);
  // A small chunk makes long prompts exercise several query chunks per ring block.
  auto engine = MakeDistributed(length > 1000 ? 512 : 16);
  std::vector<std::vector<float>> dist = DistributedLogits(*engine, prompt, decode);
  if (WorldRank() != 0) return;
  std::vector<std::vector<float>> local = LocalLogits(prompt, decode);
  ASSERT_EQ(dist.size(), local.size());
  for (size_t i = 0; i < dist.size(); ++i)
    EXPECT_LT(MaxRelError(dist[i], local[i]), 1e-5) << "step " << i << " of length " << length;
}

INSTANTIATE_TEST_SUITE_P(Lengths, CpEngineTest, ::testing::Values(1, 5, 64, 1000, 4097));

// Decode tokens' MLP split over the ranks by intermediate columns (the default) and computed
// whole on every rank: both equal one process, every rank ends each step with the same bits
// (its logits equal rank 0's exactly), and the split runs once per layer and decode token.
TEST(CpDecodeMlpTest, SplitAndWholeMatchSingleProcessOnEveryRank) {
  const std::vector<int32_t> prompt = RandomIds(300, 97, 41);
  const std::vector<int32_t> decode = RandomIds(6, 97, 42);
  const std::vector<std::vector<float>> local = LocalLogits(prompt, decode);
  for (const bool split : {true, false}) {
    SCOPED_TRACE(split ? "split" : "whole");
    EngineOptions options = RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF32, 32);
    options.split_decode_mlp = split;
    const std::unique_ptr<Engine> engine = MakeDistributed(options);
    Engine& e = *engine;
    const std::vector<std::vector<float>> dist = DistributedLogits(e, prompt, decode);
    ASSERT_EQ(dist.size(), local.size());
    for (size_t i = 0; i < dist.size(); ++i)
      EXPECT_LT(MaxRelError(dist[i], local[i]), 1e-5) << "step " << i;
    const int ranks = e.comm().size();
    const int64_t layers = e.config().num_hidden_layers;
    const int64_t tokens = static_cast<int64_t>(decode.size());
    EXPECT_EQ(e.stats().split_mlp_passes, split && ranks > 1 ? layers * tokens : 0);
    // Every rank's decode logits, bit for bit those of rank 0.
    for (size_t i = 1; i < dist.size(); ++i) {
      std::vector<float> all(dist[i].size() * static_cast<size_t>(ranks));
      ASSERT_TRUE(e.comm()
                      .HostAllGather(dist[i].data(), all.data(), dist[i].size() * sizeof(float))
                      .ok());
      for (int r = 1; r < ranks; ++r)
        EXPECT_TRUE(std::equal(dist[i].begin(), dist[i].end(), all.begin() + r * dist[i].size()))
            << "rank " << r << " step " << i;
    }
  }
}

TEST(CpGenerateTest, GreedyTokensMatchSingleProcess) {
  auto engine = MakeDistributed(32);
  GenerationRequest r;
  r.prompt_ids = RandomIds(300, 97, 5);
  r.max_new_tokens = 12;
  r.ignore_eos = true;
  auto dist = Generate(*engine, r);
  ASSERT_TRUE(dist.ok()) << dist.status().ToString();
  EXPECT_EQ(engine->num_sequences(), 0);
  auto local_engine = Engine::Create(RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF32));
  ASSERT_TRUE(local_engine.ok());
  auto local = Generate(**local_engine, r);
  ASSERT_TRUE(local.ok());
  EXPECT_EQ(dist->ids, local->ids);
  // Sampled generation too: the draws are keyed by (seed, step), so ranks do not matter.
  r.sampling.temperature = 1.3f;
  r.sampling.seed = 9;
  auto dist_sampled = Generate(*engine, r);
  auto local_sampled = Generate(**local_engine, r);
  ASSERT_TRUE(dist_sampled.ok() && local_sampled.ok());
  EXPECT_EQ(dist_sampled->ids, local_sampled->ids);
}

TEST(CpGenerateTest, AShapeAndStreamingHeadsMatchSingleProcess) {
  // Windows narrower than a shard, so the mask cuts across ring blocks and decode shards; layer
  // 1 mixes a full and a streaming KV head (one call per run of each rank's rows).
  auto engine = MakeDistributed(32);
  auto local_engine = Engine::Create(RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF32));
  ASSERT_TRUE(local_engine.ok());
  GenerationRequest r;
  r.prompt_ids = RandomIds(500, 97, 12);
  r.max_new_tokens = 10;
  r.ignore_eos = true;
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 4;
  r.policy = testing::PolicyFor(**local_engine, R"({"version": 1,
      "layers": [{"layer": 0, "prefill": ["a-shape", "dense"], "decode": "streaming-head"},
                 {"layer": 1, "prefill": "a-shape", "decode": ["full", "streaming-head"]}],
      "a_shape": {"sink_tokens": 5, "window_tokens": 37},
      "streaming_head": {"sink_tokens": 3, "window_tokens": 7}})");
  auto dist = Generate(*engine, r);
  ASSERT_TRUE(dist.ok()) << dist.status().ToString();
  auto local = Generate(**local_engine, r);
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  EXPECT_EQ(dist->ids, local->ids);
  r.policy.reset();
  auto dense = Generate(**local_engine, r);
  ASSERT_TRUE(dense.ok());
  EXPECT_NE(dense->ids, local->ids);  // the policy changed the answer
}

// Prefills `prompt` in chunks of `chunk` tokens (each sharded over the ranks) and decodes `steps`
// greedy tokens, each a step plan of its own: the logits of the last chunk and of each decode
// step, on every rank; `kv_bytes`: the sequence's KV bytes on this rank.
std::vector<std::vector<float>> ChunkedLogits(Engine& e, const std::vector<int32_t>& prompt,
                                              int64_t chunk, int steps, int64_t* kv_bytes) {
  const int ranks = e.comm().size(), rank = e.comm().rank();
  const int64_t n = static_cast<int64_t>(prompt.size()), vocab = e.config().vocab_size;
  std::vector<std::vector<float>> out;
  EXPECT_TRUE(e.StartSequence(1, {n + steps, chunk, e.policy()}).ok());
  *kv_bytes = e.KvBytes();
  auto record = [&](const std::optional<ConstTensorView>& logits, int owner) {
    std::vector<float> host(static_cast<size_t>(vocab));
    if (logits.has_value()) {
      EXPECT_TRUE(e.backend().CopyToHost(*logits, {host.data(), DType::kF32, Shape{vocab}}).ok());
    }
    if (owner >= 0) {
      EXPECT_TRUE(e.comm().HostBroadcast(host.data(), host.size() * sizeof(float), owner).ok());
    }
    out.push_back(host);
  };
  for (int64_t begin = 0; begin < n; begin += chunk) {
    const int64_t count = std::min(chunk, n - begin);
    auto step = ShardedPrefill(1, begin, std::span(prompt).subspan(begin, count), rank, ranks);
    auto done = e.RunStep(StepPlan{{*step}});
    EXPECT_TRUE(done.ok()) << done.status().ToString();
    if (!done.ok()) return out;
    if (begin + count == n)
      record(done->logits[0], ShardPlan::Create(count, ranks)->RankOfPromptPosition(count - 1));
  }
  for (int i = 0; i < steps; ++i) {
    const std::vector<float>& last = out.back();
    const int32_t id =
        static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
    auto done = e.RunStep(StepPlan{{DecodeStep(1, id)}});
    EXPECT_TRUE(done.ok()) << done.status().ToString();
    if (!done.ok()) return out;
    record(done->logits[0], -1);
  }
  e.EndSequence(1);
  return out;
}

// DuoAttention's layers with a store per group of KV heads (the streaming heads keep only their
// sinks and window; split_kv_heads) give what one store of every row gives, on N ranks and in one
// process, in less memory: prompts prefilled in chunks, with and without a dense fallback below
// 40 tokens (the streaming heads keep every row until then).
TEST(CpGenerateTest, DuoLayersWithAStorePerHeadGroupMatchOneStore) {
  auto engine = MakeDistributed(32);
  EngineOptions one_store = RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF32, 32);
  one_store.split_kv_heads = false;
  auto local = Engine::Create(one_store);
  ASSERT_TRUE(local.ok());
  const std::vector<int32_t> prompt = RandomIds(150, 97, 21);
  for (int64_t dense_below : {0, 40}) {
    SCOPED_TRACE("dense_below_tokens " + std::to_string(dense_below));
    const AttentionPolicy policy = testing::PolicyFor(**local, R"({"version": 1,
        "dense_below_tokens": )" + std::to_string(dense_below) + R"(,
        "layers": [{"layer": 0, "prefill": ["dense", "a-shape"], "decode": ["full", "streaming-head"]},
                   {"layer": 1, "prefill": ["a-shape", "dense"], "decode": ["streaming-head", "full"]}],
        "a_shape": {"sink_tokens": 3, "window_tokens": 6},
        "streaming_head": {"sink_tokens": 3, "window_tokens": 7}})");
    ASSERT_TRUE(engine->SetPolicy(policy).ok());
    ASSERT_TRUE((*local)->SetPolicy(policy).ok());
    int64_t split_bytes = 0, one_bytes = 0, local_bytes = 0;
    const auto split = ChunkedLogits(*engine, prompt, 16, 6, &split_bytes);
    const auto one = ChunkedLogits(**local, prompt, 16, 6, &local_bytes);
    ASSERT_EQ(split.size(), 7u);
    ASSERT_EQ(one.size(), 7u);
    for (size_t i = 0; i < split.size(); ++i) {
      EXPECT_LT(MaxRelError(split[i], one[i]), 1e-5) << "step " << i;
      EXPECT_EQ(std::max_element(split[i].begin(), split[i].end()) - split[i].begin(),
                std::max_element(one[i].begin(), one[i].end()) - one[i].begin());
    }
    // The same ranks with one store per layer: more memory, the same logits.
    engine->ResetStats();
    EngineOptions options = engine->options();
    options.split_kv_heads = false;
    const std::unique_ptr<Engine> unsplit = MakeDistributed(options);
    ASSERT_TRUE(unsplit->SetPolicy(policy).ok());
    const auto same = ChunkedLogits(*unsplit, prompt, 16, 6, &one_bytes);
    ASSERT_EQ(same.size(), split.size());
    for (size_t i = 0; i < split.size(); ++i)
      EXPECT_LT(MaxRelError(split[i], same[i]), 1e-5) << "step " << i;
    EXPECT_LT(split_bytes, one_bytes);
  }
}

// Chunked prefill with queries sent to the keys' ranks and partials sent back (pass-Q), forced
// and chosen by size (auto), gives what one process gives for every pattern that rides a ring:
// dense heads, A-shape heads, dense and A-shape heads packed beside vertical-slash heads, and
// DuoAttention's layers with a store per group of KV heads.
TEST(CpPrefillExchangeTest, PassQMatchesSingleProcess) {
  auto make = [](PrefillExchange exchange) {
    EngineOptions o = RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF32, 16);
    o.prefill_exchange = exchange;
    return MakeDistributed(o);
  };
  auto pass_q = make(PrefillExchange::kPassQ);
  auto automatic = make(PrefillExchange::kAuto);
  auto local = Engine::Create(RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF32, 16));
  ASSERT_TRUE(local.ok());
  const bool several = pass_q->comm().size() > 1;
  const std::vector<int32_t> prompt = RandomIds(150, 97, 41);
  for (const char* fields : {
           R"("default": {"prefill": "dense"})",
           R"("default": {"prefill": "a-shape"},
              "a_shape": {"sink_tokens": 3, "window_tokens": 20})",
           R"("default": {"prefill": ["a-shape", "vertical-slash"]},
              "a_shape": {"sink_tokens": 3, "window_tokens": 40},
              "vertical_slash": {"last_queries": 16, "vertical": 12, "slash": 24})",
           R"("default": {"prefill": ["dense", "a-shape"], "decode": ["full", "streaming-head"]},
              "a_shape": {"sink_tokens": 3, "window_tokens": 6},
              "streaming_head": {"sink_tokens": 3, "window_tokens": 7})"}) {
    SCOPED_TRACE(fields);
    const AttentionPolicy policy =
        testing::PolicyFor(**local, std::string(R"({"version": 1, )") + fields + "}");
    for (Engine* e : {pass_q.get(), automatic.get(), local->get()})
      ASSERT_TRUE(e->SetPolicy(policy).ok());
    int64_t bytes = 0;
    const auto one = ChunkedLogits(**local, prompt, 150, 4, &bytes);
    ASSERT_EQ(one.size(), 5u);
    for (int64_t chunk : {8, 37, 150}) {
      for (Engine* e : {pass_q.get(), automatic.get()}) {
        SCOPED_TRACE(std::string(PrefillExchangeName(e->options().prefill_exchange)) +
                     ", chunks of " + std::to_string(chunk));
        e->ResetStats();
        const auto got = ChunkedLogits(*e, prompt, chunk, 4, &bytes);
        ASSERT_EQ(got.size(), one.size());
        for (size_t i = 0; i < got.size(); ++i) {
          EXPECT_LT(MaxRelError(got[i], one[i]), 1e-5) << "step " << i;
          EXPECT_EQ(std::max_element(got[i].begin(), got[i].end()) - got[i].begin(),
                    std::max_element(one[i].begin(), one[i].end()) - one[i].begin());
        }
        // Forced, every ring pass exchanges queries; by size, the short chunks deep into the
        // prompt do and the whole prompt in one step does not.
        const int64_t passes = e->stats().pass_q_passes;
        if (!several) {
          EXPECT_EQ(passes, 0);
        } else if (e == pass_q.get() || chunk == 8) {
          EXPECT_GT(passes, 0);
        } else if (chunk == 150) {
          EXPECT_EQ(passes, 0);
        }
      }
    }
  }
}

TEST(CpGenerateTest, StaticEvictionMatchesSingleProcess) {
  // The heavy hitters are chosen over every rank's keys: N ranks keep what one process keeps.
  auto engine = MakeDistributed(32);
  auto local_engine = Engine::Create(RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF32));
  ASSERT_TRUE(local_engine.ok());
  GenerationRequest r;
  r.prompt_ids = RandomIds(400, 97, 13);
  r.max_new_tokens = 10;
  r.ignore_eos = true;
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 6;
  r.policy = testing::PolicyFor(**local_engine, R"({"version": 1,
      "default": {"decode": "static-eviction"},
      "static_eviction": {"keep_tokens": 20, "recent_tokens": 6, "observed_queries": 12}})");
  auto dist = Generate(*engine, r);
  ASSERT_TRUE(dist.ok()) << dist.status().ToString();
  auto local = Generate(**local_engine, r);
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  EXPECT_EQ(dist->ids, local->ids);
}

// An FP8 (E4M3) cache: each element is quantised as it is written, whichever rank writes it, so
// N ranks give one process's logits (dense prefill and decode over the ring's FP8 blocks) and
// its tokens under a sparse prefill, DuoAttention's streaming heads and static eviction.
TEST(CpGenerateTest, Fp8CacheMatchesSingleProcess) {
  const EngineOptions options = RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF8E4M3, 32);
  auto engine = MakeDistributed(options);
  const std::vector<int32_t> prompt = RandomIds(700, 97, 51), decode = RandomIds(4, 97, 52);
  const std::vector<std::vector<float>> dist = DistributedLogits(*engine, prompt, decode);
  auto local = Engine::Create(options);
  ASSERT_TRUE(local.ok());
  if (WorldRank() == 0) {
    std::vector<std::vector<float>> one(1);
    ASSERT_TRUE(testing::StartSequence(**local, 704).ok());
    ASSERT_TRUE(testing::ForwardToHost(**local, prompt, &one[0]).ok());
    for (int32_t id : decode) {
      one.emplace_back();
      const int32_t ids[1] = {id};
      ASSERT_TRUE(testing::ForwardToHost(**local, ids, &one.back()).ok());
    }
    testing::EndSequence(**local);
    ASSERT_EQ(dist.size(), one.size());
    for (size_t i = 0; i < one.size(); ++i)
      EXPECT_LT(MaxRelError(dist[i], one[i]), 1e-5) << "step " << i;
    // The cache is FP8: the logits differ from an F32 cache's.
    const std::vector<std::vector<float>> f32 = LocalLogits(prompt, decode);
    EXPECT_GT(MaxRelError(one[0], f32[0]), 1e-4);
  }
  GenerationRequest r;
  r.prompt_ids = RandomIds(400, 97, 53);
  r.max_new_tokens = 8;
  r.ignore_eos = true;
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 9;
  for (const char* fields : {
           R"("default": {"prefill": "vertical-slash"},
              "vertical_slash": {"last_queries": 16, "vertical": 12, "slash": 24})",
           R"("layers": [{"layer": 0, "prefill": ["a-shape", "dense"], "decode": "streaming-head"},
                         {"layer": 1, "prefill": "a-shape", "decode": ["full", "streaming-head"]}],
              "a_shape": {"sink_tokens": 5, "window_tokens": 37},
              "streaming_head": {"sink_tokens": 3, "window_tokens": 7})",
           R"("default": {"decode": "static-eviction"},
              "static_eviction": {"keep_tokens": 20, "recent_tokens": 6, "observed_queries": 12})"}) {
    r.policy = testing::PolicyFor(**local, std::string(R"({"version": 1, )") + fields + "}");
    auto d = Generate(*engine, r);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    auto l = Generate(**local, r);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    EXPECT_EQ(d->ids, l->ids) << fields;
  }
}

// Vertical-slash, block-sparse and antidiagonal prefill: N ranks select what one process selects
// (the index is global: the same count of attended query-key pairs) and fetch only the keys their
// queries need, so the logits match one process, the greedy tokens are the same and far fewer
// bytes move than in the dense ring.
TEST(CpSparseTest, MatchesSingleProcessAndMovesFewerBytes) {
  const std::vector<int32_t> prompt = RandomIds(900, 97, 31);
  const std::vector<int32_t> decode = RandomIds(3, 97, 32);
  auto engine = MakeDistributed(64);
  auto local = Engine::Create(RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF32, 64));
  ASSERT_TRUE(local.ok());
  engine->ResetStats();
  DistributedLogits(*engine, prompt, {});
  const int64_t dense_bytes = engine->stats().comm_bytes;
  for (const char* fields : {
           R"("default": {"prefill": "vertical-slash"},
              "vertical_slash": {"last_queries": 16, "vertical": 12, "slash": 24})",
           R"("default": {"prefill": "block-sparse"}, "block_sparse": {"block": 32, "top_blocks": 3})",
           R"("default": {"prefill": ["a-shape", "vertical-slash"]},
              "a_shape": {"sink_tokens": 3, "window_tokens": 40},
              "vertical_slash": {"last_queries": 16, "vertical": 12, "slash": 24})",
           R"("default": {"prefill": ["block-sparse", "vertical-slash"]},
              "vertical_slash": {"last_queries": 40, "vertical": 50, "slash": 150},
              "block_sparse": {"block": 16, "top_blocks": 5})",
           R"("default": {"prefill": "antidiagonal"},
              "antidiagonal": {"block": 32, "stride": 4, "mass_permille": 700})",
           R"("default": {"prefill": ["antidiagonal", "a-shape"]},
              "a_shape": {"sink_tokens": 3, "window_tokens": 40},
              "antidiagonal": {"block": 16, "stride": 8, "mass_permille": 400})"}) {
    const AttentionPolicy policy =
        testing::PolicyFor(**local, std::string(R"({"version": 1, )") + fields + "}");
    ASSERT_TRUE(engine->SetPolicy(policy).ok());
    ASSERT_TRUE((*local)->SetPolicy(policy).ok());
    engine->ResetStats();
    PrefillDensity dist_pairs;
    const auto dist = DistributedLogits(*engine, prompt, decode, &dist_pairs);
    const int64_t sparse_bytes = engine->stats().comm_bytes;
    // Vertical-slash reads bands near the diagonal and a few columns: far fewer keys cross
    // ranks. (Random weights pick blocks all over the prompt, so block-sparse fetches most of it
    // here; the A-shape policy keeps a ring for half the heads.)
    const bool vertical_slash_only = std::string(fields).find("block") == std::string::npos &&
                                     std::string(fields).find("a-shape") == std::string::npos;
    if (engine->comm().size() > 1 && vertical_slash_only) {
      EXPECT_LT(sparse_bytes * 2, dense_bytes) << fields;
    }
    std::vector<std::vector<float>> one(1);
    ASSERT_TRUE(
        testing::StartSequence(**local, static_cast<int64_t>(prompt.size() + decode.size())).ok());
    PrefillDensity one_pairs;
    ASSERT_TRUE(testing::ForwardToHost(**local, prompt, &one[0], &one_pairs).ok());
    EXPECT_EQ(dist_pairs.attended_pairs, one_pairs.attended_pairs) << fields;
    EXPECT_EQ(dist_pairs.causal_pairs, one_pairs.causal_pairs) << fields;
    EXPECT_LT(one_pairs.attended_pairs, one_pairs.causal_pairs) << fields;
    // Decode steps (a one-token prefill step would attend sparsely).
    for (int32_t id : decode) {
      auto d = testing::ForwardDecode(**local, id);
      ASSERT_TRUE(d.ok()) << d.status().ToString();
      one.emplace_back(one[0].size());
      ASSERT_TRUE((*local)->backend().CopyToHost(*d, {one.back().data(), DType::kF32,
                                                     Shape{static_cast<int64_t>(one[0].size())}})
                      .ok());
    }
    testing::EndSequence(**local);
    ASSERT_EQ(dist.size(), one.size());
    for (size_t i = 0; i < dist.size(); ++i) {
      EXPECT_LT(MaxRelError(dist[i], one[i]), 1e-5) << fields << " step " << i;
      EXPECT_EQ(std::max_element(dist[i].begin(), dist[i].end()) - dist[i].begin(),
                std::max_element(one[i].begin(), one[i].end()) - one[i].begin())
          << "greedy token, " << fields << " step " << i;
    }
  }
}

TEST(CpGenerateTest, BadRequestFailsOnEveryRankWithoutHanging) {
  auto engine = MakeDistributed(32);
  GenerationRequest r;
  r.prompt_ids = {1, 2, 500};
  auto result = Generate(*engine, r);
  EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument);
  r.prompt_ids = {1, 2, 3};
  r.max_new_tokens = 3;
  EXPECT_TRUE(Generate(*engine, r).ok());  // the engine is still usable
}

TEST(CpGenerateTest, OneRankThatCannotFitFailsEveryRank) {
  ModelConfig c = SmallConfig();
  c.max_position_embeddings = int64_t{1} << 34;
  const std::unique_ptr<Engine> engine =
      MakeDistributed(RandomEngineOptions(c, DType::kF32, DType::kF32, 32));
  Engine& e = *engine;
  const int last = e.comm().size() - 1;
  // Every rank's ring blocks hold the widest rank's rows (its capacity), and the last rank also
  // holds their KV: a capacity between what the ring alone and the ring with the KV need leaves
  // only the last rank short (this model: 512 bytes of KV and 512 of ring blocks per position).
  auto memory = e.backend().Memory();
  ASSERT_TRUE(memory.ok());
  const int64_t wide = e.comm().size() == 1 ? int64_t{1} << 33 : memory->free_bytes / 700;
  const int64_t capacity = e.comm().rank() == last ? wide : 100;
  Status s = testing::StartSequence(e, capacity, 50);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("rank " + std::to_string(last) + " needs"), std::string::npos)
      << s.ToString();
  EXPECT_FALSE(testing::HasSequence(e));
  // Afterwards the ranks still work together, and they count what the ring sent.
  EXPECT_TRUE(testing::StartSequence(e, 100, 50).ok());
  testing::EndSequence(e);
  GenerationRequest r;
  r.prompt_ids = RandomIds(64, 97, 4);
  r.max_new_tokens = 2;
  e.ResetStats();
  ASSERT_TRUE(Generate(e, r).ok());
  if (e.comm().size() > 1) {
    EXPECT_GT(e.stats().comm_bytes, 0);
  }
}

TEST(CpGenerateTest, OneRankCancellingPrefillStopsEveryRank) {
  auto engine = MakeDistributed(32);
  GenerationRequest r;
  r.prompt_ids = RandomIds(300, 97, 9);
  r.max_new_tokens = 4;
  std::vector<int64_t> seen;
  // Only the last rank says stop, after the first layer: every rank must return Cancelled.
  const int last = engine->comm().size() - 1;
  auto result = Generate(*engine, r, nullptr, [&](int64_t done, int64_t total) {
    EXPECT_EQ(total, 300);
    seen.push_back(done);
    return !(engine->comm().rank() == last && seen.size() == 1);
  });
  EXPECT_EQ(result.status().code(), StatusCode::kCancelled);
  EXPECT_EQ(seen.size(), 1u);
  EXPECT_EQ(engine->num_sequences(), 0);
  // Progress runs to the whole prompt when nobody cancels.
  seen.clear();
  auto full = Generate(*engine, r, nullptr, [&](int64_t done, int64_t) {
    seen.push_back(done);
    return true;
  });
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back(), 300);
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
}

}  // namespace
}  // namespace millipede
