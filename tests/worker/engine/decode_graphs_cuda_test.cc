// Recorded decode steps on the CUDA backend (CUDA graphs): decoding with recordings replayed
// gives, bit for bit, the logits of the same steps run unrecorded with the same arguments
// (DecodeGraphs::kUnrecorded), across bucket boundaries, for one sequence, for several decoding
// together, with DuoAttention's mixed layers and with OmniKV's roles (device tier); and the usual
// (unrecorded, exact-length) steps'
// logits within the split-KV rounding. The engine's counters show the steps were recorded and
// replayed. Skips without a GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/have_gpu.h"
#include "tests/worker/engine_test_util.h"

namespace millipede {
namespace {

using testing::HaveGpu;
using testing::MaxRelError;

struct Run {
  testing::StepLogits logits;  // [sequence][step][vocab]
  EngineStats stats;
};

Run DecodeTogether(DecodeGraphs mode, const std::string& policy,
                   const std::vector<int64_t>& prompts, int64_t steps) {
  EngineOptions o = testing::RandomEngineOptions(testing::GpuSmallConfig(4), DType::kF32,
                                                 DType::kBF16, 256);
  o.backend = BackendKind::kCuda;
  o.decode_graphs = mode;
  Run run;
  run.logits.resize(prompts.size());
  auto made = Engine::Create(o);
  EXPECT_TRUE(made.ok()) << made.status().ToString();
  if (!made.ok()) return run;
  Engine& e = **made;
  if (!policy.empty()) {
    EXPECT_TRUE(e.SetPolicy(testing::PolicyFor(e, policy)).ok());
  }
  run.logits = testing::PrefillThenDecodeTogether(e, prompts, steps);
  run.stats = e.stats();
  return run;
}

void ExpectReplaysExact(const std::string& policy, const std::vector<int64_t>& prompts,
                        int64_t steps) {
  const Run replayed = DecodeTogether(DecodeGraphs::kAuto, policy, prompts, steps);
  const Run unrecorded = DecodeTogether(DecodeGraphs::kUnrecorded, policy, prompts, steps);
  const Run usual = DecodeTogether(DecodeGraphs::kOff, policy, prompts, steps);
  // Two buckets, each recorded on its second step and replayed after; a buffer that grows during
  // the first decode steps (top-k's scratch, for OmniKV) makes one more key.
  EXPECT_GE(replayed.stats.recorded_steps, 2);
  EXPECT_LE(replayed.stats.recorded_steps, 3);
  EXPECT_GE(replayed.stats.replayed_steps, steps - 2 * replayed.stats.recorded_steps);
  EXPECT_EQ(unrecorded.stats.replayed_steps, 0);
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_EQ(replayed.logits[i].size(), static_cast<size_t>(steps));
    ASSERT_EQ(usual.logits[i].size(), static_cast<size_t>(steps));
    for (int64_t s = 0; s < steps; ++s) {
      EXPECT_EQ(replayed.logits[i][s], unrecorded.logits[i][s]) << "sequence " << i << " step " << s;
      // Key splits planned over the bucket rather than the exact length.
      EXPECT_LT(MaxRelError(replayed.logits[i][s], usual.logits[i][s]), 1e-2)
          << "sequence " << i << " step " << s;
    }
  }
}

TEST(DecodeGraphsCudaTest, OneSequenceReplaysExactly) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  ExpectReplaysExact("", {240}, 30);  // rows 241 .. 270: buckets of 256 and 512
}

TEST(DecodeGraphsCudaTest, SequencesTogetherReplayExactly) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  ExpectReplaysExact("", {240, 5, 1300}, 30);  // the first crosses its bucket, the others not
}

TEST(DecodeGraphsCudaTest, MixedStreamingLayersReplayExactly) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  const std::string duo = R"({"version": 1, "default": {"decode": ["streaming-head", "full"]},
      "streaming_head": {"sink_tokens": 4, "window_tokens": 100}})";
  ExpectReplaysExact(duo, {240, 700}, 30);
}

// One OmniKV sequence replays its recorded steps; two or more decode unrecorded, where their
// selected layers batch (a recording runs them one by one).
TEST(DecodeGraphsCudaTest, OmniKvRolesReplayExactly) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  const std::string omnikv = R"({"version": 1, "filter": {"top_k": 32},
      "layers": [{"layer": 0, "decode": "full"}, {"layer": 1, "decode": "filter"},
                 {"layer": 2, "decode": "selected"}, {"layer": 3, "decode": "selected"}]})";
  ExpectReplaysExact(omnikv, {240}, 30);
  const auto two = DecodeTogether(DecodeGraphs::kAuto, omnikv, {240, 700}, 8);
  EXPECT_EQ(two.stats.recorded_steps, 0);
  EXPECT_EQ(two.stats.replayed_steps, 0);
}

}  // namespace
}  // namespace millipede
