// Policy files: defaults, per-layer and per-head entries, parameters per head, decode roles per KV
// head, the rules every policy must keep (an error naming the place for each kind of mistake),
// and the check against what a worker runs.
#include <gtest/gtest.h>

#include "policy/attention_policy.h"

namespace millipede {
namespace {

std::string ErrorOf(const std::string& json, int64_t layers = 4, int64_t heads = 2) {
  StatusOr<AttentionPolicy> p = ParseAttentionPolicy(json, layers, heads, "policy.json");
  EXPECT_FALSE(p.ok()) << json;
  if (p.ok()) return "";
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument) << p.status().ToString();
  return p.status().message();
}

void ExpectErrorMentions(const std::string& json, const std::string& needle) {
  const std::string message = ErrorOf(json);
  EXPECT_NE(message.find(needle), std::string::npos) << json << " -> " << message;
}

std::vector<PrefillPattern> Patterns(const LayerPolicy& layer) {
  std::vector<PrefillPattern> out;
  for (const HeadPrefillPolicy& h : layer.prefill) out.push_back(h.pattern);
  return out;
}

TEST(AttentionPolicyTest, MinimalFileIsDense) {
  auto p = ParseAttentionPolicy(R"({"version": 1})", 4, 2);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_TRUE(p->IsDense());
  EXPECT_EQ(p->layers.size(), 4u);
  EXPECT_EQ(p->layers[3].prefill.size(), 2u);
  EXPECT_EQ(p->layers[3].decode, std::vector<DecodeRole>(2, DecodeRole::kFull));
  EXPECT_EQ(p->Summary(), "dense/full");
  EXPECT_EQ(*p, DensePolicy(4, 2));
  EXPECT_TRUE(DensePolicy(4, 2).IsDense());
}

TEST(AttentionPolicyTest, DecodeStrategyNamesWhatTheJobsDecodeWith) {
  auto strategy = [](const std::string& json) -> std::string {
    auto p = ParseAttentionPolicy(json, 4, 2);
    EXPECT_TRUE(p.ok()) << json << ": " << p.status().ToString();
    return p.ok() ? DecodeStrategyName(*p) : "";
  };
  EXPECT_EQ(strategy(R"({"version": 1})"), "full");
  EXPECT_EQ(strategy(R"({"version": 1, "default": {"prefill": "a-shape"}})"), "full");
  EXPECT_EQ(strategy(R"({"version": 1, "default": {"decode": "selected"},
                         "layers": [{"layer": 0, "decode": "filter"}]})"),
            "omnikv");
  EXPECT_EQ(strategy(R"({"version": 1, "layers": [{"layer": 2, "decode": "static-eviction"}]})"),
            "static-eviction");
  EXPECT_EQ(strategy(R"({"version": 1,
                         "layers": [{"layer": 1, "decode": ["streaming-head", "full"]}]})"),
            "duoattention");
}

TEST(AttentionPolicyTest, DefaultsLayersHeadsAndParameters) {
  auto p = ParseAttentionPolicy(R"({
    "version": 1,
    "default": {"prefill": "a-shape", "decode": "full"},
    "dense_below_tokens": 4096,
    "a_shape": {"sink_tokens": 64, "window_tokens": 2048},
    "vertical_slash": {"vertical": 500},
    "filter": {"top_k": 1024},
    "layers": [
      {"layer": 0, "prefill": "dense"},
      {"layer": 2, "prefill": ["vertical-slash", "streaming"], "decode": "filter"},
      {"layer": 3, "decode": "selected"}
    ]})",
                                4, 2);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_FALSE(p->IsDense());
  EXPECT_EQ(p->dense_below_tokens, 4096);
  // The top-level parameters are every head's.
  for (const LayerPolicy& layer : p->layers) {
    for (const HeadPrefillPolicy& head : layer.prefill) {
      EXPECT_EQ(head.a_shape, (AShapeParams{64, 2048}));
      EXPECT_EQ(head.vertical_slash.vertical, 500);
      EXPECT_EQ(head.vertical_slash.slash, VerticalSlashParams().slash);  // untouched default
      EXPECT_EQ(head.block_sparse, BlockSparseParams());
    }
  }
  EXPECT_EQ(p->filter.top_k, 1024);
  EXPECT_EQ(Patterns(p->layers[0]), std::vector<PrefillPattern>(2, PrefillPattern::kDense));
  EXPECT_EQ(Patterns(p->layers[1]), std::vector<PrefillPattern>(2, PrefillPattern::kAShape));
  EXPECT_EQ(p->layers[2].prefill[0].pattern, PrefillPattern::kVerticalSlash);
  EXPECT_EQ(p->layers[2].prefill[1].pattern, PrefillPattern::kAShape);  // "streaming": an alias
  EXPECT_EQ(p->layers[2].decode, std::vector<DecodeRole>(2, DecodeRole::kFilter));
  EXPECT_EQ(p->layers[2].LayerDecode(), DecodeRole::kFilter);
  EXPECT_EQ(p->layers[3].LayerDecode(), DecodeRole::kSelected);
  EXPECT_EQ(p->layers[3].prefill[0].pattern, PrefillPattern::kAShape);  // from the default
  // KV heads counted over all layers.
  EXPECT_EQ(p->Summary(),
            "prefill a-shape 5, dense 2, vertical-slash 1; decode filter 2, full 4, selected 2");
}

TEST(AttentionPolicyTest, TheQualityBaselineFilesKeepTheirMeaning) {
  // The files millipede-quality runs (tests/quality/policies), in the format before parameters
  // were per head: the top-level parameters are every head's, roles every head's.
  const std::string dir = MILLIPEDE_POLICY_FILES_DIR;
  auto a_shape = LoadAttentionPolicy(dir + "/a-shape.json", 3, 2);
  ASSERT_TRUE(a_shape.ok()) << a_shape.status().ToString();
  AttentionPolicy expected = DensePolicy(3, 2);
  for (LayerPolicy& layer : expected.layers) {
    for (HeadPrefillPolicy& head : layer.prefill) {
      head.pattern = PrefillPattern::kAShape;
      head.a_shape = {4, 256};
    }
    layer.decode.assign(2, DecodeRole::kStreamingHead);
  }
  expected.streaming_head = {4, 256};
  EXPECT_EQ(*a_shape, expected);

  auto eviction = LoadAttentionPolicy(dir + "/static-eviction.json", 3, 2);
  ASSERT_TRUE(eviction.ok()) << eviction.status().ToString();
  expected = DensePolicy(3, 2);
  for (LayerPolicy& layer : expected.layers) layer.decode.assign(2, DecodeRole::kStaticEviction);
  expected.static_eviction = {16, 16, 8};
  EXPECT_EQ(*eviction, expected);
}

TEST(AttentionPolicyTest, ParametersPerHead) {
  auto p = ParseAttentionPolicy(R"({
    "version": 1,
    "vertical_slash": {"vertical": 1000, "slash": 6096},
    "a_shape": {"sink_tokens": 8, "window_tokens": 100},
    "default": {"prefill": ["a-shape", "dense", "block-sparse"],
                "block_sparse": [null, null, {"top_blocks": 7}]},
    "layers": [
      {"layer": 1, "prefill": ["dense", "vertical-slash", "a-shape"],
       "vertical_slash": [null, {"vertical": 30, "slash": 2048}, null],
       "a_shape": {"window_tokens": 50}},
      {"layer": 2, "prefill": ["a-shape", "a-shape", "vertical-slash"],
       "a_shape": [{"window_tokens": 16}, {"window_tokens": 4096}, null],
       "vertical_slash": {"last_queries": 32}}
    ]})",
                                3, 3);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  // Layer 0 is the default: its block-sparse head has its own budget, the others the defaults.
  const LayerPolicy& l0 = p->layers[0];
  EXPECT_EQ(Patterns(l0),
            (std::vector<PrefillPattern>{PrefillPattern::kAShape, PrefillPattern::kDense,
                                         PrefillPattern::kBlockSparse}));
  EXPECT_EQ(l0.prefill[2].block_sparse, (BlockSparseParams{64, 7}));
  EXPECT_EQ(l0.prefill[1].block_sparse, BlockSparseParams());
  EXPECT_EQ(l0.prefill[0].a_shape, (AShapeParams{8, 100}));
  // Layer 1 starts from the default and changes what it names.
  const LayerPolicy& l1 = p->layers[1];
  EXPECT_EQ(l1.prefill[1].vertical_slash, (VerticalSlashParams{64, 30, 2048}));
  EXPECT_EQ(l1.prefill[0].vertical_slash, (VerticalSlashParams{64, 1000, 6096}));
  EXPECT_EQ(l1.prefill[2].a_shape, (AShapeParams{8, 50}));            // the object is every head's
  EXPECT_EQ(l1.prefill[2].block_sparse, (BlockSparseParams{64, 7}));  // kept, though unused
  // Layer 2: windows per head, one sink count.
  const LayerPolicy& l2 = p->layers[2];
  EXPECT_EQ(l2.prefill[0].a_shape, (AShapeParams{8, 16}));
  EXPECT_EQ(l2.prefill[1].a_shape, (AShapeParams{8, 4096}));
  EXPECT_EQ(l2.prefill[2].vertical_slash, (VerticalSlashParams{32, 1000, 6096}));
}

TEST(AttentionPolicyTest, DecodeRolesPerKvHead) {
  auto p = ParseAttentionPolicy(R"({
    "version": 1,
    "streaming_head": {"sink_tokens": 64, "window_tokens": 256},
    "default": {"decode": ["full", "streaming-head", "streaming-head", "full"]},
    "layers": [{"layer": 1, "decode": "streaming-head"},
               {"layer": 2, "decode": ["full", "full", "full", "full"]},
               {"layer": 3, "decode": "h2o"}]})",
                                4, 4);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->layers[0].decode,
            (std::vector<DecodeRole>{DecodeRole::kFull, DecodeRole::kStreamingHead,
                                     DecodeRole::kStreamingHead, DecodeRole::kFull}));
  EXPECT_TRUE(p->layers[0].MixedDecode());
  EXPECT_EQ(p->layers[0].LayerDecode(), DecodeRole::kFull);  // mixed: the heads keep every key
  EXPECT_FALSE(p->layers[1].MixedDecode());
  EXPECT_EQ(p->layers[1].LayerDecode(), DecodeRole::kStreamingHead);
  EXPECT_FALSE(p->layers[2].MixedDecode());
  EXPECT_EQ(p->layers[2].LayerDecode(), DecodeRole::kFull);
  EXPECT_EQ(p->layers[3].LayerDecode(), DecodeRole::kStaticEviction);
  EXPECT_EQ(p->streaming_head, (AShapeParams{64, 256}));
  EXPECT_EQ(p->Summary(), "prefill dense 16; decode full 6, static-eviction 4, streaming-head 6");
}

TEST(AttentionPolicyTest, EveryMistakeIsNamed) {
  ExpectErrorMentions(R"({})", "version");
  ExpectErrorMentions(R"({"version": 2})", "version 2");
  ExpectErrorMentions(R"({"version": 1, "layer": []})", "unknown field \"layer\"");
  ExpectErrorMentions(R"({"version": 1, "default": {"prefill": "sparse"}})",
                      "unknown prefill pattern \"sparse\"");
  ExpectErrorMentions(R"({"version": 1, "default": {"decode": "evict"}})",
                      "unknown decode role \"evict\"");
  ExpectErrorMentions(R"({"version": 1, "default": {"layer": 1}})", "unknown field \"layer\"");
  ExpectErrorMentions(R"({"version": 1, "layers": [{"layer": 4}]})", "layer 4 outside");
  ExpectErrorMentions(R"({"version": 1, "layers": [{"layer": -1}]})", "layer -1 outside");
  ExpectErrorMentions(R"({"version": 1, "layers": [{"layer": 1}, {"layer": 1}]})",
                      "listed twice");
  ExpectErrorMentions(R"({"version": 1, "layers": [{"layer": 1, "prefill": ["dense"]}]})",
                      "lists 1 patterns but the model has 2 KV heads");
  ExpectErrorMentions(R"({"version": 1, "layers": [{"layer": 1, "prefill": ["dense", 3]}]})",
                      "layers[0].prefill[1]");
  ExpectErrorMentions(R"({"version": 1, "layers": [{"layer": 1, "prefill": ["dense", "x"]}]})",
                      "layers[0].prefill[1]");
  ExpectErrorMentions(R"({"version": 1, "layers": [{"layer": 1, "prefill": 3}]})",
                      "layers[0].prefill must be a pattern name or a list");
  ExpectErrorMentions(R"({"version": 1, "layers": [{"layer": 0, "decode": "x"}]})",
                      "layers[0]");
  ExpectErrorMentions(R"({"version": 1, "layers": {"layer": 0}})", "layers must be a list");
  ExpectErrorMentions(R"({"version": 1, "a_shape": {"window_tokens": 0}})",
                      "a_shape.window_tokens must be positive");
  ExpectErrorMentions(R"({"version": 1, "a_shape": {"window": 10}})", "unknown field \"window\"");
  ExpectErrorMentions(R"({"version": 1, "streaming_head": {"sink_tokens": -1}})",
                      "streaming_head.sink_tokens must be positive");
  ExpectErrorMentions(R"({"version": 1, "dense_below_tokens": -5})", "dense_below_tokens");
  // Counts beyond any context, whose sums would overflow the stores' sizes.
  ExpectErrorMentions(R"({"version": 1, "streaming_head": {"window_tokens": 9000000000000000000}})",
                      "streaming_head.window_tokens is 9000000000000000000, beyond any context");
  ExpectErrorMentions(R"({"version": 1, "dense_below_tokens": 2000000000000})",
                      "dense_below_tokens is 2000000000000, beyond any context");
  ExpectErrorMentions(R"({"version": 1, "version": 1})", "duplicate field \"version\"");
  ExpectErrorMentions(R"({"version": 1)", "policy.json");
  ExpectErrorMentions(R"([1, 2])", "must be a JSON object");
}

TEST(AttentionPolicyTest, PerHeadMistakesAreNamed) {
  // Per-head lists of the wrong length or kind.
  ExpectErrorMentions(R"({"version": 1, "layers": [{"layer": 2, "decode": ["full"]}]})",
                      "layers[0].decode lists 1 roles but the model has 2 KV heads");
  ExpectErrorMentions(R"({"version": 1, "layers": [{"layer": 2, "decode": ["full", 1]}]})",
                      "layers[0].decode[1] must be a role name");
  ExpectErrorMentions(R"({"version": 1, "layers": [{"layer": 2, "decode": ["full", "y"]}]})",
                      "layers[0].decode[1]");
  ExpectErrorMentions(R"({"version": 1, "layers": [{"layer": 2, "prefill": "a-shape",
                          "a_shape": [null]}]})",
                      "layers[0].a_shape lists 1 entries but the model has 2 KV heads");
  ExpectErrorMentions(R"({"version": 1, "layers": [{"layer": 2, "a_shape": 5}]})",
                      "layers[0].a_shape must be an object or a list");
  ExpectErrorMentions(R"({"version": 1, "layers": [{"layer": 2, "prefill": "a-shape",
                          "a_shape": [null, 5]}]})",
                      "layers[0].a_shape[1] must be a JSON object");
  // Parameters for a head whose pattern would ignore them.
  ExpectErrorMentions(R"({"version": 1, "layers": [{"layer": 2, "prefill": ["dense", "a-shape"],
                          "vertical_slash": [{"vertical": 5}, null]}]})",
                      "layers[0].vertical_slash[0] is given, but KV head 0 is dense, not "
                      "vertical-slash");
  ExpectErrorMentions(R"({"version": 1, "default": {"prefill": "block-sparse",
                          "block_sparse": [{"top_blocks": 0}, null]}})",
                      "default.block_sparse[0].top_blocks must be positive");
  ExpectErrorMentions(R"({"version": 1, "default": {"prefill": "block-sparse",
                          "block_sparse": [{"blocks": 3}, null]}})",
                      "unknown field \"blocks\"");
  // Filter, selected and static-eviction are layer-wide.
  ExpectErrorMentions(R"({"version": 1, "layers": [{"layer": 3, "decode": ["full", "filter"]}]})",
                      "layer 3, KV head 0: decode role \"full\" beside \"filter\" (KV head 1)");
  ExpectErrorMentions(
      R"({"version": 1,
          "layers": [{"layer": 1, "decode": ["static-eviction", "streaming-head"]}]})",
      "layer 1, KV head 1: decode role \"streaming-head\" beside \"static-eviction\"");
  ExpectErrorMentions(
      R"({"version": 1, "layers": [{"layer": 1, "decode": ["selected", "filter"]}]})",
      "layer 1, KV head 1: decode role \"filter\" beside \"selected\"");
  // A selected layer reads the choice of a filter layer before it.
  ExpectErrorMentions(R"({"version": 1, "layers": [{"layer": 1, "decode": "selected"}]})",
                      "layer 1 is \"selected\" but no \"filter\" layer comes before it");
  ExpectErrorMentions(R"({"version": 1, "layers": [{"layer": 2, "decode": "selected"},
                          {"layer": 3, "decode": "filter"}]})",
                      "layer 2 is \"selected\" but no \"filter\"");
  ExpectErrorMentions(R"({"version": 1, "default": {"decode": "selected"}})",
                      "layer 0 is \"selected\"");
  EXPECT_TRUE(ParseAttentionPolicy(R"({"version": 1, "layers": [{"layer": 1, "decode": "filter"},
                                       {"layer": 2, "decode": "selected"},
                                       {"layer": 3, "decode": "selected"}]})",
                                   4, 2)
                  .ok());
  // One sink count per layer; windows may differ.
  ExpectErrorMentions(R"({"version": 1, "layers": [{"layer": 2, "prefill": "a-shape",
                          "a_shape": [{"sink_tokens": 4}, {"sink_tokens": 8}]}]})",
                      "layer 2: a-shape KV heads 0 and 1 have different sink_tokens (4 and 8)");
  auto windows = ParseAttentionPolicy(R"({"version": 1, "default": {"prefill": "a-shape",
      "a_shape": [{"window_tokens": 4}, {"window_tokens": 8}]}})",
                                      4, 2);
  EXPECT_TRUE(windows.ok()) << windows.status().ToString();
}

TEST(AttentionPolicyTest, ValidationOfABuiltPolicy) {
  // A policy that came from elsewhere (a control message, code) is held to the same rules.
  const AttentionPolicy good = DensePolicy(2, 2);
  EXPECT_TRUE(ValidateAttentionPolicy(good, 2, 2).ok());
  auto error = [&](const AttentionPolicy& p, int64_t layers = 2, int64_t heads = 2) {
    Status s = ValidateAttentionPolicy(p, layers, heads, "job 7");
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    return s.message();
  };
  EXPECT_NE(error(good, 3).find("job 7: 2 layers for a model of 3"), std::string::npos);
  EXPECT_NE(error(good, 2, 4).find("layer 0 has 2 prefill entries for 4 KV heads"),
            std::string::npos);
  AttentionPolicy p = good;
  p.layers[1].decode.pop_back();
  EXPECT_NE(error(p).find("layer 1 has 1 decode roles for 2 KV heads"), std::string::npos);
  p = good;
  p.layers[1].prefill[1].vertical_slash.slash = 0;  // unused by a dense head: fine
  EXPECT_TRUE(ValidateAttentionPolicy(p, 2, 2).ok());
  p.layers[1].prefill[1].pattern = PrefillPattern::kVerticalSlash;
  EXPECT_NE(error(p).find("layer 1, KV head 1: vertical_slash.slash must be positive, got 0"),
            std::string::npos);
  p = good;
  p.dense_below_tokens = -1;
  EXPECT_NE(error(p).find("dense_below_tokens"), std::string::npos);
  p = good;
  p.static_eviction.observed_queries = 0;
  EXPECT_NE(error(p).find("static_eviction.observed_queries must be positive"), std::string::npos);
  p = good;
  p.layers[0].decode[1] = DecodeRole::kFilter;
  EXPECT_NE(error(p).find("layer 0, KV head 0: decode role \"full\" beside \"filter\""),
            std::string::npos);
  p = good;
  p.layers[1].decode.assign(2, DecodeRole::kSelected);
  EXPECT_NE(error(p).find("job 7: layer 1 is \"selected\" but no \"filter\" layer comes before"),
            std::string::npos);
  p.layers[0].decode.assign(2, DecodeRole::kFilter);
  EXPECT_TRUE(ValidateAttentionPolicy(p, 2, 2).ok());
  p = good;
  p.layers[0].decode[1] = static_cast<DecodeRole>(kNumDecodeRoles);
  EXPECT_NE(error(p).find("unknown decode role 5"), std::string::npos);
  p = good;
  p.layers[0].prefill[0].pattern = static_cast<PrefillPattern>(kNumPrefillPatterns);
  EXPECT_NE(error(p).find("unknown prefill pattern 5"), std::string::npos);
  EXPECT_EQ(ValidateAttentionPolicy(good, 0, 2).code(), StatusCode::kInvalidArgument);
}

TEST(AttentionPolicyTest, CheckPolicyRunnableAsksTheCapabilities) {
  auto p = ParseAttentionPolicy(R"({"version": 1,
      "layers": [{"layer": 1, "prefill": ["dense", "a-shape"],
                  "decode": ["full", "streaming-head"]},
                 {"layer": 2, "decode": "static-eviction"}]})",
                                3, 2);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const PolicyCapabilities all{
      {PrefillPattern::kDense, PrefillPattern::kAShape},
      {DecodeRole::kFull, DecodeRole::kStreamingHead, DecodeRole::kStaticEviction},
      /*mixed_decode_layers=*/true};
  EXPECT_TRUE(CheckPolicyRunnable(*p, all).ok());
  // Dense prefill only: the first a-shape head is named, and what the workers run.
  PolicyCapabilities caps = all;
  caps.prefill = {PrefillPattern::kDense};
  Status s = CheckPolicyRunnable(*p, caps);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("prefill pattern \"a-shape\" (layer 1, KV head 1) is not available"),
            std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("they run dense"), std::string::npos) << s.ToString();
  // A decode role per KV head.
  caps = all;
  caps.decode = {DecodeRole::kFull, DecodeRole::kStaticEviction};
  s = CheckPolicyRunnable(*p, caps);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("decode role \"streaming-head\" (layer 1, KV head 1)"),
            std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("they run full, static-eviction"), std::string::npos);
  caps.decode = {DecodeRole::kFull, DecodeRole::kStreamingHead};
  s = CheckPolicyRunnable(*p, caps);
  EXPECT_NE(s.message().find("decode role \"static-eviction\" (layer 2, KV head 0)"),
            std::string::npos)
      << s.ToString();
  // Nothing at all: even dense is refused, saying so.
  s = CheckPolicyRunnable(DensePolicy(1, 1), PolicyCapabilities{});
  EXPECT_NE(s.message().find("they run none"), std::string::npos) << s.ToString();
}

TEST(AttentionPolicyTest, CapabilitiesIntersect) {
  const PolicyCapabilities cpu{
      {PrefillPattern::kDense, PrefillPattern::kAShape},
      {DecodeRole::kFull, DecodeRole::kStreamingHead, DecodeRole::kStaticEviction}};
  const PolicyCapabilities gpu{{PrefillPattern::kDense},
                               {DecodeRole::kStreamingHead, DecodeRole::kFull}};
  const PolicyCapabilities both = IntersectCapabilities(cpu, gpu);
  EXPECT_EQ(both.prefill, std::vector<PrefillPattern>{PrefillPattern::kDense});
  EXPECT_EQ(both.decode, (std::vector<DecodeRole>{DecodeRole::kFull, DecodeRole::kStreamingHead}));
  EXPECT_TRUE(both.Runs(DecodeRole::kStreamingHead));
  EXPECT_FALSE(both.Runs(DecodeRole::kStaticEviction));
  EXPECT_EQ(IntersectCapabilities(cpu, cpu), cpu);
  PolicyCapabilities mixed = cpu;
  mixed.mixed_decode_layers = true;
  EXPECT_FALSE(IntersectCapabilities(mixed, cpu).mixed_decode_layers);
  EXPECT_TRUE(IntersectCapabilities(mixed, mixed).mixed_decode_layers);
}

TEST(AttentionPolicyTest, LayersMixingDecodeRolesNeedWorkersThatRunThem) {
  auto p = ParseAttentionPolicy(R"({"version": 1,
      "layers": [{"layer": 1, "decode": ["full", "streaming-head"]}]})", 2, 2);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  PolicyCapabilities caps{{PrefillPattern::kDense},
                          {DecodeRole::kFull, DecodeRole::kStreamingHead}};
  Status s = CheckPolicyRunnable(*p, caps);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("layer 1 mixes decode roles per KV head"), std::string::npos)
      << s.ToString();
  caps.mixed_decode_layers = true;
  EXPECT_TRUE(CheckPolicyRunnable(*p, caps).ok());
  // One role per layer needs nothing more.
  caps.mixed_decode_layers = false;
  EXPECT_TRUE(CheckPolicyRunnable(DensePolicy(2, 2), caps).ok());
  // FP8 attention needs workers that run it.
  AttentionPolicy fp8 = DensePolicy(2, 2);
  fp8.fp8_attention = true;
  s = CheckPolicyRunnable(fp8, caps);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("fp8_attention is not available"), std::string::npos) << s.ToString();
  caps.fp8_attention = true;
  EXPECT_TRUE(CheckPolicyRunnable(fp8, caps).ok());
  PolicyCapabilities without = caps;
  without.fp8_attention = false;
  EXPECT_FALSE(IntersectCapabilities(caps, without).fp8_attention);
  EXPECT_TRUE(IntersectCapabilities(caps, caps).fp8_attention);
}

TEST(AttentionPolicyTest, NamesRoundTrip) {
  for (int i = 0; i < kNumPrefillPatterns; ++i) {
    const auto p = static_cast<PrefillPattern>(i);
    EXPECT_EQ(*ParsePrefillPattern(PrefillPatternName(p)), p);
  }
  for (int i = 0; i < kNumDecodeRoles; ++i) {
    const auto r = static_cast<DecodeRole>(i);
    EXPECT_EQ(*ParseDecodeRole(DecodeRoleName(r)), r);
  }
}

TEST(AttentionPolicyTest, MissingFileIsAnError) {
  auto p = LoadAttentionPolicy("/nonexistent/policy.json", 2, 2);
  EXPECT_FALSE(p.ok());
}

}  // namespace
}  // namespace millipede
