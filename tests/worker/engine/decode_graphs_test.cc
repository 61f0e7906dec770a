// Recorded decode steps (decode graphs): the bucket of rows a recorded step's attention spans,
// the record-on-second-sight cache, and, on the CPU backend (which cannot record), the recorded
// steps' arguments (whole stores, cache rows and lengths read from backend memory) giving the
// usual steps' logits bit for bit: one sequence and several, across bucket boundaries, with
// DuoAttention's mixed layers and with OmniKV's roles, and a full sequence still refused.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/worker/engine_test_util.h"
#include "worker/engine/decode_graphs.h"

namespace millipede {
namespace {

using testing::RandomEngineOptions;
using testing::SmallConfig;

TEST(DecodeGraphBucketTest, CoversTheRowsWithLittleSlackAndRarelyChanges) {
  int64_t changes = 0, previous = 0;
  for (int64_t rows = 1; rows <= (1 << 20); rows += 1 + rows / 1000) {
    const int64_t bucket = DecodeGraphBucket(rows, int64_t{1} << 30);
    ASSERT_GE(bucket, rows);
    ASSERT_LT(bucket - rows, std::max<int64_t>(kMinBucketRows, rows / 8 + 1)) << rows;
    ASSERT_GE(bucket, previous);  // monotone in rows
    if (bucket != previous) ++changes;
    previous = bucket;
  }
  // Eight buckets per doubling from 2K on: a few hundred recordings up to 1M rows.
  EXPECT_LT(changes, 120);
  EXPECT_EQ(DecodeGraphBucket(1, 100), 100);  // never past the store
  EXPECT_EQ(DecodeGraphBucket(300, 5000), 512);
  EXPECT_EQ(DecodeGraphBucket(32768, int64_t{1} << 30), 32768);
  EXPECT_EQ(DecodeGraphBucket(32769, int64_t{1} << 30), 32768 + 4096);
}

class FakeOps final : public RecordedOps {};

TEST(DecodeGraphCacheTest, RecordsOnSecondSightAndKeepsTheRecentOnes) {
  DecodeGraphCache cache(2);
  using A = DecodeGraphCache::Action;
  const DecodeGraphKey a{{1, 256}}, b{{1, 512}}, c{{2, 256}};
  EXPECT_EQ(cache.Next(a), A::kRun);
  EXPECT_EQ(cache.Next(a), A::kRecord);
  cache.Store(a, std::make_unique<FakeOps>());
  EXPECT_EQ(cache.Next(a), A::kReplay);
  EXPECT_NE(cache.Find(a), nullptr);
  EXPECT_EQ(cache.Find(b), nullptr);
  for (const DecodeGraphKey* k : {&b, &c}) {
    EXPECT_EQ(cache.Next(*k), A::kRun);
    EXPECT_EQ(cache.Next(*k), A::kRecord);
    cache.Store(*k, std::make_unique<FakeOps>());
  }
  EXPECT_EQ(cache.size(), 2u);  // a, the least recently used, went
  EXPECT_EQ(cache.Find(a), nullptr);
  EXPECT_EQ(cache.Next(a), A::kRun);
  cache.Refuse(c);  // c could not be recorded after all: its steps run as usual
  EXPECT_EQ(cache.Find(c), nullptr);
  EXPECT_EQ(cache.Next(c), A::kRun);
  EXPECT_EQ(cache.Next(c), A::kRun);
  cache.Clear();
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.Next(c), A::kRun);
  EXPECT_EQ(cache.Next(c), A::kRecord);
}

// Logits [sequence][step] of `steps` decode steps of the sequences together after their prompts,
// on the CPU engine in `mode` under `policy` (empty: dense).
testing::StepLogits DecodeTogether(DecodeGraphs mode, const std::string& policy,
                                   const std::vector<int64_t>& prompts, int64_t steps) {
  EngineOptions o = RandomEngineOptions(SmallConfig(), DType::kF32, DType::kBF16, 128);
  o.decode_graphs = mode;
  auto made = Engine::Create(o);
  EXPECT_TRUE(made.ok()) << made.status().ToString();
  if (!made.ok()) return testing::StepLogits(prompts.size());
  Engine& e = **made;
  if (!policy.empty()) {
    EXPECT_TRUE(e.SetPolicy(testing::PolicyFor(e, policy)).ok());
  }
  testing::StepLogits out = testing::PrefillThenDecodeTogether(e, prompts, steps);
  // The sequences are full now: one more token is refused as usual, whatever the mode.
  StepPlan plan;
  plan.steps.push_back({1, StepKind::kDecode, {}, {3}});
  EXPECT_FALSE(e.RunStep(plan).ok());
  EXPECT_EQ(e.stats().recorded_steps, 0);  // the CPU backend records nothing
  return out;
}

TEST(DecodeGraphsTest, RecordedArgumentsGiveTheUsualLogitsBitForBit) {
  // 250 + 12 tokens cross the 256-row bucket; 1 and 3 sequences (the fused one-token path and
  // the batched one).
  for (const std::vector<int64_t>& prompts :
       {std::vector<int64_t>{250}, std::vector<int64_t>{250, 7, 600}}) {
    const auto usual = DecodeTogether(DecodeGraphs::kOff, "", prompts, 12);
    const auto recorded = DecodeTogether(DecodeGraphs::kUnrecorded, "", prompts, 12);
    ASSERT_EQ(usual.size(), recorded.size());
    for (size_t i = 0; i < usual.size(); ++i) {
      ASSERT_EQ(recorded[i].size(), 12u);
      EXPECT_EQ(recorded[i], usual[i]) << "sequence " << i << " of " << prompts.size();
    }
  }
}

TEST(DecodeGraphsTest, MixedStreamingLayersTakeTheirWindowsAtTheUploadedLength) {
  const std::string duo = R"({"version": 1, "default": {"decode": ["streaming-head", "full"]},
      "streaming_head": {"sink_tokens": 4, "window_tokens": 100}})";
  const std::vector<int64_t> prompts = {250, 30};
  const auto usual = DecodeTogether(DecodeGraphs::kOff, duo, prompts, 10);
  const auto recorded = DecodeTogether(DecodeGraphs::kUnrecorded, duo, prompts, 10);
  const auto dense = DecodeTogether(DecodeGraphs::kUnrecorded, "", prompts, 10);
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_EQ(recorded[i].size(), 10u);
    EXPECT_EQ(recorded[i], usual[i]) << "sequence " << i;
  }
  // The windows matter for the long prompt (the check can fail).
  EXPECT_GT(testing::MaxRelError(recorded[0][0], dense[0][0]), 1e-3);
  // One sequence: the usual step runs the strategy's own call (its windows in one attention op).
  const auto alone = DecodeTogether(DecodeGraphs::kOff, duo, {250}, 10);
  const auto alone_recorded = DecodeTogether(DecodeGraphs::kUnrecorded, duo, {250}, 10);
  ASSERT_EQ(alone_recorded[0].size(), 10u);
  for (size_t s = 0; s < 10; ++s)
    EXPECT_LT(testing::MaxRelError(alone_recorded[0][s], alone[0][s]), 1e-6) << s;
}

// OmniKV's roles on one rank over device stores: the filter layer's full attention and the
// selected layer's generated rows take their lengths from backend memory; the selection itself
// (scores, top-k, gather index) keeps its shapes through decode. (Two sequences are not recorded:
// their unrecorded step batches them; both sides must still agree.)
TEST(DecodeGraphsTest, OmniKvRolesTakeTheirLengthsFromBackendMemory) {
  const std::string omnikv = R"({"version": 1, "filter": {"top_k": 16},
      "layers": [{"layer": 0, "decode": "filter"}, {"layer": 1, "decode": "selected"}]})";
  for (const std::vector<int64_t>& prompts :
       {std::vector<int64_t>{250}, std::vector<int64_t>{250, 40}}) {
    const auto usual = DecodeTogether(DecodeGraphs::kOff, omnikv, prompts, 12);
    const auto recorded = DecodeTogether(DecodeGraphs::kUnrecorded, omnikv, prompts, 12);
    const auto dense = DecodeTogether(DecodeGraphs::kOff, "", prompts, 12);
    for (size_t i = 0; i < prompts.size(); ++i) {
      ASSERT_EQ(recorded[i].size(), 12u);
      EXPECT_EQ(recorded[i], usual[i]) << "sequence " << i << " of " << prompts.size();
    }
    // 16 of 250 context rows: the selection changes the logits (the check can fail).
    EXPECT_GT(testing::MaxRelError(recorded[0][0], dense[0][0]), 1e-4);
  }
}

}  // namespace
}  // namespace millipede
