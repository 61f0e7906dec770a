// MInference configs to policies: each pattern's parameters, the query-head to KV-head rule (one
// pattern, the largest sizes; mixed patterns by precedence), shared a-shape sinks, the starting
// layer, and an error naming the layer and head for each kind of bad file.
#include "policy/minference_import.h"

#include <gtest/gtest.h>

#include "common/json_util.h"
#include "policy/policy_writer.h"

namespace millipede {
namespace {

ModelConfig Shape(int64_t layers, int64_t heads, int64_t kv_heads) {
  ModelConfig c;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  return c;
}

// A config in MInference's format: layers[l][q] = {pattern, vertical_size, slash_size}.
struct Entry {
  std::string pattern;
  int64_t vertical;
  int64_t slash;
};
std::string Config(const std::vector<std::vector<Entry>>& layers) {
  Json root = Json::array();
  for (const std::vector<Entry>& layer : layers) {
    Json obj = Json::object();
    for (size_t q = 0; q < layer.size(); ++q)
      obj[std::to_string(q)] =
          Json::array({layer[q].pattern, layer[q].vertical, layer[q].slash, 0.5});
    root.push_back(obj);
  }
  return root.dump();
}

std::vector<Entry> Uniform(int64_t heads, Entry e) { return std::vector<Entry>(heads, e); }

PolicyImport ImportOk(const std::string& text, const ModelConfig& model,
                      MInferenceImportOptions options = {}) {
  StatusOr<PolicyImport> r = ImportMInferenceConfig(text, model, options, "mi.json");
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return {};
  // What the importer builds is a valid policy that the file format carries unchanged.
  EXPECT_TRUE(
      ValidateAttentionPolicy(r->policy, model.num_hidden_layers, model.num_key_value_heads).ok());
  StatusOr<AttentionPolicy> back = ParseAttentionPolicy(
      AttentionPolicyToJson(r->policy), model.num_hidden_layers, model.num_key_value_heads);
  EXPECT_TRUE(back.ok() && *back == r->policy);
  return *r;
}

std::string ErrorOf(const std::string& text, const ModelConfig& model,
                    MInferenceImportOptions options = {}) {
  StatusOr<PolicyImport> r = ImportMInferenceConfig(text, model, options, "mi.json");
  EXPECT_FALSE(r.ok()) << text;
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message().rfind("mi.json", 0), 0u) << r.status().message();
  return r.status().message();
}

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

TEST(MInferenceImportTest, EachPatternMapsToItsParameters) {
  // One KV head per query head: no grouping.
  const std::string text = Config({{{"vertical_and_slash", 1000, 6096},
                                    {"vertical_and_slash", 3, 10},
                                    {"block_sparse", 8, 1},
                                    {"stream_llm", 100, 800}}});
  const PolicyImport r = ImportOk(text, Shape(1, 4, 4));
  const LayerPolicy& layer = r.policy.layers[0];
  EXPECT_EQ(layer.prefill[0].pattern, PrefillPattern::kVerticalSlash);
  EXPECT_EQ(layer.prefill[0].vertical_slash, (VerticalSlashParams{64, 1000, 6096}));
  // MInference's kernel keeps at least 30 columns and 50 diagonals.
  EXPECT_EQ(layer.prefill[1].vertical_slash, (VerticalSlashParams{64, 30, 50}));
  // Block-sparse ignores the sizes: top 100 blocks of 64.
  EXPECT_EQ(layer.prefill[2].pattern, PrefillPattern::kBlockSparse);
  EXPECT_EQ(layer.prefill[2].block_sparse, (BlockSparseParams{64, 100}));
  // stream_llm: n_init sinks and an n_local window.
  EXPECT_EQ(layer.prefill[3].pattern, PrefillPattern::kAShape);
  EXPECT_EQ(layer.prefill[3].a_shape, (AShapeParams{100, 800}));
  EXPECT_EQ(layer.decode, std::vector<DecodeRole>(4, DecodeRole::kFull));
  EXPECT_TRUE(r.notes.empty());
  EXPECT_EQ(r.policy.dense_below_tokens, 0);
}

TEST(MInferenceImportTest, AShapeIsAnAliasOfStreamLlmAndTheScoreIsOptional) {
  const std::string text = R"([{"0": ["a_shape", 64, 512], "1": ["stream_llm", 64, 256, 7]}])";
  const PolicyImport r = ImportOk(text, Shape(1, 2, 2));
  EXPECT_EQ(r.policy.layers[0].prefill[0].a_shape, (AShapeParams{64, 512}));
  EXPECT_EQ(r.policy.layers[0].prefill[1].a_shape, (AShapeParams{64, 256}));
}

TEST(MInferenceImportTest, QueryHeadsOfAGroupShareTheLargestSizes) {
  // 8 query heads, 2 KV heads: query heads 0-3 -> KV head 0, 4-7 -> KV head 1.
  std::vector<Entry> layer = Uniform(8, {"vertical_and_slash", 1000, 6096});
  layer[1] = {"vertical_and_slash", 3500, 100};
  layer[2] = {"vertical_and_slash", 30, 800};
  layer[5] = {"stream_llm", 100, 800};
  layer[6] = {"stream_llm", 200, 400};
  layer[4] = layer[7] = {"stream_llm", 100, 800};
  const PolicyImport r = ImportOk(Config({layer}), Shape(1, 8, 2));
  const LayerPolicy& out = r.policy.layers[0];
  EXPECT_EQ(out.prefill[0].pattern, PrefillPattern::kVerticalSlash);
  EXPECT_EQ(out.prefill[0].vertical_slash, (VerticalSlashParams{64, 3500, 6096}));
  EXPECT_EQ(out.prefill[1].pattern, PrefillPattern::kAShape);
  EXPECT_EQ(out.prefill[1].a_shape, (AShapeParams{200, 800}));
  EXPECT_EQ(r.merged_parameter_heads, 2);
  EXPECT_TRUE(r.notes.empty());
}

TEST(MInferenceImportTest, MixedPatternsFollowThePrecedenceAndAreNoted) {
  std::vector<Entry> layer(12);
  // KV head 0: vertical-slash wins over the others, with its own heads' sizes only.
  layer[0] = {"stream_llm", 4000, 9000};
  layer[1] = {"vertical_and_slash", 100, 800};
  layer[2] = {"block_sparse", 8, 1};
  // KV head 1: block-sparse wins over a-shape.
  layer[3] = {"stream_llm", 100, 800};
  layer[4] = {"block_sparse", 10, 1};
  layer[5] = {"stream_llm", 100, 800};
  // KV heads 2 and 3: a-shape alone.
  for (int q = 6; q < 12; ++q) layer[q] = {"stream_llm", 100, 800};
  layer[10] = {"stream_llm", 300, 800};
  const PolicyImport r = ImportOk(Config({layer}), Shape(1, 12, 4));
  const LayerPolicy& out = r.policy.layers[0];
  EXPECT_EQ(out.prefill[0].pattern, PrefillPattern::kVerticalSlash);
  EXPECT_EQ(out.prefill[0].vertical_slash, (VerticalSlashParams{64, 100, 800}));
  EXPECT_EQ(out.prefill[1].pattern, PrefillPattern::kBlockSparse);
  // The layer's a-shape heads share the largest sink count (300, from query head 10).
  EXPECT_EQ(out.prefill[2].a_shape, (AShapeParams{300, 800}));
  EXPECT_EQ(out.prefill[3].a_shape, (AShapeParams{300, 800}));
  ASSERT_EQ(r.notes.size(), 3u);
  EXPECT_HAS(r.notes[0], "layer 0, KV head 0 (query heads 0-2)");
  EXPECT_HAS(r.notes[0], "-> vertical-slash");
  EXPECT_HAS(r.notes[1], "KV head 1 (query heads 3-5): a-shape 2, block-sparse 1 -> block-sparse");
  EXPECT_HAS(r.notes[2], "layer 0: a-shape heads had 100 to 300 initial tokens; all keep 300");
}

TEST(MInferenceImportTest, StartingLayerAndDenseFallback) {
  const std::string text =
      Config({Uniform(2, {"vertical_and_slash", 1000, 6096}),
              Uniform(2, {"vertical_and_slash", 1000, 6096}), Uniform(2, {"block_sparse", 8, 1})});
  MInferenceImportOptions options;
  options.starting_layer = 2;
  options.dense_below_tokens = 4096;
  const PolicyImport r = ImportOk(text, Shape(3, 2, 1), options);
  EXPECT_EQ(r.policy.layers[0].prefill[0].pattern, PrefillPattern::kDense);
  EXPECT_EQ(r.policy.layers[1].prefill[0].pattern, PrefillPattern::kDense);
  EXPECT_EQ(r.policy.layers[2].prefill[0].pattern, PrefillPattern::kBlockSparse);
  EXPECT_EQ(r.policy.dense_below_tokens, 4096);
  options.starting_layer = 4;
  EXPECT_HAS(ErrorOf(text, Shape(3, 2, 1), options), "starting layer 4");
  options = {};
  options.dense_below_tokens = -1;
  EXPECT_HAS(ErrorOf(text, Shape(3, 2, 1), options), "dense_below_tokens");
}

TEST(MInferenceImportTest, ShapesThatDoNotMatchTheModelAreRefused) {
  const std::string two_layers = Config({Uniform(4, {"vertical_and_slash", 1000, 6096}),
                                         Uniform(4, {"vertical_and_slash", 1000, 6096})});
  EXPECT_HAS(ErrorOf(two_layers, Shape(3, 4, 2)), "lists 2 layers but the model has 3");
  EXPECT_HAS(ErrorOf(two_layers, Shape(2, 6, 2)), "layer 0: query head 4 is missing");
  EXPECT_HAS(ErrorOf(two_layers, Shape(2, 2, 1)),
             "layer 0, query head \"2\": the model has 2 query heads");
  // A later layer with a head missing.
  const std::string short_layer =
      Config({Uniform(4, {"vertical_and_slash", 1000, 6096}), Uniform(3, {"block_sparse", 1, 1})});
  EXPECT_HAS(ErrorOf(short_layer, Shape(2, 4, 2)), "layer 1: query head 3 is missing");
  EXPECT_HAS(ErrorOf(two_layers, Shape(2, 4, 3)), "not one a policy can be made for");
}

TEST(MInferenceImportTest, MalformedEntriesNameTheLayerAndHead) {
  const ModelConfig m = Shape(2, 2, 1);
  const std::string ok0 =
      R"({"0": ["vertical_and_slash", 1000, 6096, 1], "1": ["block_sparse", 8, 1, 2]})";
  const auto with_layer1 = [&](const std::string& layer1) {
    return "[" + ok0 + ", " + layer1 + "]";
  };
  EXPECT_HAS(
      ErrorOf(with_layer1(R"({"0": ["dilated", 1, 2, 3], "1": ["block_sparse", 8, 1, 2]})"), m),
      "layer 1, query head \"0\": unknown pattern \"dilated\"");
  EXPECT_HAS(ErrorOf(with_layer1(R"({"0": ["block_sparse", 8, 1], "1": ["block_sparse", 8]})"), m),
             "layer 1, query head \"1\": expected [pattern, vertical_size, slash_size, score]");
  EXPECT_HAS(ErrorOf(with_layer1(R"({"0": ["block_sparse", 8, 1], "1": [3, 8, 1]})"), m),
             "query head \"1\": the pattern must be a string");
  EXPECT_HAS(
      ErrorOf(with_layer1(R"({"0": ["vertical_and_slash", -5, 1], "1": ["block_sparse", 8, 1]})"),
              m),
      "layer 1, query head \"0\": vertical_size must be >= 0, got -5");
  EXPECT_HAS(
      ErrorOf(with_layer1(R"({"0": ["vertical_and_slash", 10, 1.5], "1": ["block_sparse", 8, 1]})"),
              m),
      "slash_size must be an integer, got 1.5");
  EXPECT_HAS(
      ErrorOf(
          with_layer1(R"({"0": ["vertical_and_slash", 10, 5, "x"], "1": ["block_sparse", 8, 1]})"),
          m),
      "the score must be a number");
  EXPECT_HAS(
      ErrorOf(with_layer1(R"({"0": ["stream_llm", 0, 800], "1": ["block_sparse", 8, 1]})"), m),
      "stream_llm needs at least one initial token");
  EXPECT_HAS(
      ErrorOf(with_layer1(R"({"x": ["block_sparse", 8, 1], "1": ["block_sparse", 8, 1]})"), m),
      "query head \"x\": a query head key must be a head index");
  EXPECT_HAS(
      ErrorOf(with_layer1(R"({"00": ["block_sparse", 8, 1], "1": ["block_sparse", 8, 1]})"), m),
      "without leading zeros");
  EXPECT_HAS(
      ErrorOf(with_layer1(R"({"0": ["block_sparse", 8, 1], "0": ["block_sparse", 8, 1]})"), m),
      "\"0\"");
  EXPECT_HAS(ErrorOf(with_layer1(R"(["block_sparse", 8, 1])"), m),
             "layer 1: expected an object mapping query heads to patterns");
  EXPECT_HAS(ErrorOf(R"({"0": {}})", m), "expected a list with one object per layer");
  EXPECT_HAS(ErrorOf(R"([{"0": ["block_sparse", 8, 1]})", m), "invalid JSON");
}

}  // namespace
}  // namespace millipede
