#include "checkpoint/model_config.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "tests/checkpoint/test_util.h"

namespace millipede {
namespace {

using testing::ExpectErrorContains;
using testing::ScratchDir;
using testing::WriteBytes;

// Modeled on meta-llama/Meta-Llama-3.1-8B's config.json.
constexpr const char* kLlama3 = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": [128001, 128008, 128009],
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  },
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
})";

// Modeled on mistralai/Mistral-7B-v0.1, with a linear scaling added.
constexpr const char* kMistral = R"({
  "architectures": ["MistralForCausalLM"],
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 32768,
  "model_type": "mistral",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"type": "linear", "factor": 2.0},
  "rope_theta": 10000.0,
  "sliding_window": 4096,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.34.0.dev0",
  "use_cache": true,
  "vocab_size": 32000
})";

// Modeled on Qwen/Qwen2-7B, with a dynamic scaling added.
constexpr const char* kQwen2 = R"({
  "architectures": ["Qwen2ForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151643,
  "hidden_act": "silu",
  "hidden_size": 3584,
  "initializer_range": 0.02,
  "intermediate_size": 18944,
  "max_position_embeddings": 131072,
  "max_window_layers": 28,
  "model_type": "qwen2",
  "num_attention_heads": 28,
  "num_hidden_layers": 28,
  "num_key_value_heads": 4,
  "rms_norm_eps": 1e-06,
  "rope_scaling": {"type": "dynamic", "factor": 4.0},
  "rope_theta": 1000000.0,
  "sliding_window": 131072,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.37.2",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 152064
})";

Json Parse(const char* text) { return Json::parse(text); }

StatusOr<ModelConfig> ParseWith(const char* base, const Json& patch) {
  Json j = Parse(base);
  j.merge_patch(patch);  // a null in the patch removes the key
  return ParseModelConfig(j, "config.json");
}

void ExpectRoundTrip(const ModelConfig& c, const char* architecture) {
  Json j = ModelConfigToJson(c);
  EXPECT_EQ(j["architectures"], Json::array({architecture}));
  EXPECT_EQ(j["model_type"], c.model_type);
  // Through text, as it would go through a file.
  auto back = ParseModelConfig(Json::parse(j.dump(2)), "written");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(*back == c) << j.dump(2);
}

TEST(ModelConfigTest, ParsesLlama3) {
  auto c = ParseModelConfig(Parse(kLlama3), "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->model_type, "llama");
  EXPECT_EQ(c->vocab_size, 128256);
  EXPECT_EQ(c->hidden_size, 4096);
  EXPECT_EQ(c->intermediate_size, 14336);
  EXPECT_EQ(c->num_hidden_layers, 32);
  EXPECT_EQ(c->num_attention_heads, 32);
  EXPECT_EQ(c->num_key_value_heads, 8);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->rms_norm_eps, 1e-5);
  EXPECT_EQ(c->rope_theta, 500000.0);
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_EQ(c->rope_scaling.factor, 8.0);
  EXPECT_EQ(c->rope_scaling.low_freq_factor, 1.0);
  EXPECT_EQ(c->rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c->max_position_embeddings, 131072);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_FALSE(c->o_proj_bias);
  EXPECT_FALSE(c->mlp_bias);
  EXPECT_EQ(c->bos_token_id, 128000);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int32_t>{128001, 128008, 128009}));
  EXPECT_EQ(c->torch_dtype, "bfloat16");
  EXPECT_EQ(c->sliding_window, 0);
  EXPECT_EQ(c->hidden_act, "silu");
  ExpectRoundTrip(*c, "LlamaForCausalLM");
}

TEST(ModelConfigTest, ParsesMistral) {
  auto c = ParseModelConfig(Parse(kMistral), "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->model_type, "mistral");
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kLinear);
  EXPECT_EQ(c->rope_scaling.factor, 2.0);
  EXPECT_EQ(c->sliding_window, 4096);
  EXPECT_EQ(c->bos_token_id, 1);
  EXPECT_EQ(c->eos_token_ids, std::vector<int32_t>{2});
  EXPECT_FALSE(c->qkv_bias || c->o_proj_bias || c->mlp_bias);
  ExpectRoundTrip(*c, "MistralForCausalLM");

  // Mistral 7B v0.2 and later: no window, written as null.
  auto no_window = ParseWith(kMistral, {{"sliding_window", Json::array()}});
  ExpectErrorContains(no_window.status(), {"config.json", "\"sliding_window\""});
  Json j = Parse(kMistral);
  j["sliding_window"] = nullptr;
  auto v2 = ParseModelConfig(j, "config.json");
  ASSERT_TRUE(v2.ok());
  EXPECT_EQ(v2->sliding_window, 0);
  ExpectRoundTrip(*v2, "MistralForCausalLM");
}

TEST(ModelConfigTest, ParsesQwen2) {
  auto c = ParseModelConfig(Parse(kQwen2), "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->model_type, "qwen2");
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->num_key_value_heads, 4);
  EXPECT_EQ(c->rope_theta, 1e6);
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kDynamic);
  EXPECT_EQ(c->rope_scaling.factor, 4.0);
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_FALSE(c->o_proj_bias);
  EXPECT_FALSE(c->mlp_bias);
  EXPECT_EQ(c->sliding_window, 0) << "use_sliding_window is false";
  ExpectRoundTrip(*c, "Qwen2ForCausalLM");
}

TEST(ModelConfigTest, Qwen2SlidingWindowOnlyWhenAllLayersUseIt) {
  auto all = ParseWith(
      kQwen2, {{"use_sliding_window", true}, {"max_window_layers", 0}, {"sliding_window", 32768}});
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(all->sliding_window, 32768);
  ExpectRoundTrip(*all, "Qwen2ForCausalLM");

  auto none = ParseWith(kQwen2, {{"use_sliding_window", true}, {"max_window_layers", 28}});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->sliding_window, 0);

  ExpectErrorContains(
      ParseWith(kQwen2, {{"use_sliding_window", true}, {"max_window_layers", 14}}).status(),
      {"config.json", "max_window_layers 14 < num_hidden_layers 28", "not supported"});
}

TEST(ModelConfigTest, RopeScalingVariants) {
  auto null_scaling = ParseWith(kLlama3, {{"rope_scaling", nullptr}});
  ASSERT_TRUE(null_scaling.ok());
  EXPECT_EQ(null_scaling->rope_scaling.type, RopeScalingType::kNone);
  ExpectRoundTrip(*null_scaling, "LlamaForCausalLM");

  Json j = Parse(kLlama3);
  j["rope_scaling"] = nullptr;  // explicitly null, not removed
  auto explicit_null = ParseModelConfig(j, "config.json");
  ASSERT_TRUE(explicit_null.ok());
  EXPECT_EQ(explicit_null->rope_scaling.type, RopeScalingType::kNone);

  auto default_type = ParseWith(kLlama3, {{"rope_scaling", {{"rope_type", "default"}}}});
  ASSERT_TRUE(default_type.ok()) << default_type.status().ToString();
  EXPECT_EQ(default_type->rope_scaling.type, RopeScalingType::kNone);

  auto both_keys = ParseWith(kMistral, {{"rope_scaling", {{"rope_type", "linear"}}}});
  ASSERT_TRUE(both_keys.ok()) << both_keys.status().ToString();  // "type" is still "linear"
  EXPECT_EQ(both_keys->rope_scaling.type, RopeScalingType::kLinear);

  // transformers 5 folds theta and scaling into "rope_parameters".
  Json v5 = Parse(kLlama3);
  Json params = v5["rope_scaling"];
  params["rope_theta"] = 500000.0;
  v5.erase("rope_scaling");
  v5.erase("rope_theta");
  v5["rope_parameters"] = params;
  auto from_v5 = ParseModelConfig(v5, "config.json");
  ASSERT_TRUE(from_v5.ok()) << from_v5.status().ToString();
  EXPECT_EQ(from_v5->rope_theta, 500000.0);
  EXPECT_EQ(from_v5->rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_EQ(from_v5->rope_scaling.original_max_position_embeddings, 8192);
}

TEST(ModelConfigTest, RopeScalingErrors) {
  ExpectErrorContains(
      ParseWith(kLlama3, {{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}}}).status(),
      {"config.json: rope_scaling", "unsupported type \"yarn\"", "llama3"});
  ExpectErrorContains(
      ParseWith(kLlama3, {{"rope_scaling", {{"original_max_position_embeddings", nullptr}}}})
          .status(),
      {"rope_scaling", "\"original_max_position_embeddings\""});
  ExpectErrorContains(
      ParseWith(kLlama3, {{"rope_scaling", {{"low_freq_factor", nullptr}}}}).status(),
      {"rope_scaling", "\"low_freq_factor\""});
  ExpectErrorContains(ParseWith(kMistral, {{"rope_scaling", {{"factor", nullptr}}}}).status(),
                      {"rope_scaling", "missing field \"factor\""});
  ExpectErrorContains(ParseWith(kMistral, {{"rope_scaling", {{"factor", 0.5}}}}).status(),
                      {"rope_scaling (linear) factor must be >= 1, got 0.5"});
  ExpectErrorContains(ParseWith(kMistral, {{"rope_scaling", {{"rope_type", "dynamic"}}}}).status(),
                      {"\"rope_type\" \"dynamic\" and \"type\" \"linear\" disagree"});
  ExpectErrorContains(ParseWith(kMistral, {{"rope_scaling", {{"type", nullptr}}}}).status(),
                      {"rope_scaling: missing \"rope_type\""});
  ExpectErrorContains(ParseWith(kMistral, {{"rope_scaling", Json::array()}}).status(),
                      {"rope_scaling must be an object or null"});
  ExpectErrorContains(ParseWith(kLlama3, {{"rope_scaling", {{"high_freq_factor", 1.0}}}}).status(),
                      {"high_freq_factor 1 must exceed low_freq_factor 1"});
  ExpectErrorContains(
      ParseWith(kLlama3, {{"rope_scaling", {{"original_max_position_embeddings", 0}}}}).status(),
      {"needs original_max_position_embeddings > 0"});
}

TEST(ModelConfigTest, DefaultsMatchTransformers) {
  const Json minimal = {
      {"model_type", "llama"},         {"vocab_size", 1000},     {"hidden_size", 64},
      {"intermediate_size", 128},      {"num_hidden_layers", 2}, {"num_attention_heads", 4},
      {"max_position_embeddings", 256}};
  auto c = ParseModelConfig(minimal, "minimal");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->num_key_value_heads, 4);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->rms_norm_eps, 1e-6);
  EXPECT_EQ(c->rope_theta, 10000.0);
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kNone);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_FALSE(c->bos_token_id.has_value());
  EXPECT_TRUE(c->eos_token_ids.empty());
  EXPECT_EQ(c->torch_dtype, "");
  EXPECT_EQ(c->hidden_act, "silu");
  ExpectRoundTrip(*c, "LlamaForCausalLM");

  Json nulls = minimal;
  nulls["num_key_value_heads"] = nullptr;
  nulls["head_dim"] = nullptr;
  nulls["dtype"] = "float16";  // newer transformers' spelling of torch_dtype
  auto n = ParseModelConfig(nulls, "nulls");
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(n->num_key_value_heads, 4);
  EXPECT_EQ(n->head_dim, 16);
  EXPECT_EQ(n->torch_dtype, "float16");
}

TEST(ModelConfigTest, ExplicitHeadDimAndBiases) {
  // Mistral-Nemo: head_dim 128 although hidden_size / heads is 160.
  auto nemo = ParseWith(kMistral, {{"hidden_size", 5120}, {"head_dim", 128}});
  ASSERT_TRUE(nemo.ok()) << nemo.status().ToString();
  EXPECT_EQ(nemo->head_dim, 128);
  ExpectRoundTrip(*nemo, "MistralForCausalLM");

  auto biased = ParseWith(
      kLlama3, {{"attention_bias", true}, {"mlp_bias", true}, {"tie_word_embeddings", true}});
  ASSERT_TRUE(biased.ok());
  EXPECT_TRUE(biased->qkv_bias);
  EXPECT_TRUE(biased->o_proj_bias);
  EXPECT_TRUE(biased->mlp_bias);
  EXPECT_TRUE(biased->tie_word_embeddings);
  ExpectRoundTrip(*biased, "LlamaForCausalLM");
}

TEST(ModelConfigTest, RequiredFieldsAndTypes) {
  ExpectErrorContains(ParseWith(kLlama3, {{"hidden_size", nullptr}}).status(),
                      {"config.json", "missing field \"hidden_size\""});
  ExpectErrorContains(ParseWith(kQwen2, {{"vocab_size", nullptr}}).status(),
                      {"missing field \"vocab_size\""});
  ExpectErrorContains(ParseWith(kQwen2, {{"max_position_embeddings", nullptr}}).status(),
                      {"missing field \"max_position_embeddings\""});
  ExpectErrorContains(ParseWith(kQwen2, {{"model_type", nullptr}}).status(),
                      {"missing field \"model_type\""});
  ExpectErrorContains(ParseWith(kLlama3, {{"num_hidden_layers", "32"}}).status(),
                      {"field \"num_hidden_layers\" must be an integer"});
  ExpectErrorContains(ParseWith(kLlama3, {{"tie_word_embeddings", 1}}).status(),
                      {"field \"tie_word_embeddings\" must be true or false"});
  ExpectErrorContains(ParseModelConfig(Json::array(), "config.json").status(),
                      {"config.json: must be a JSON object"});
}

TEST(ModelConfigTest, RejectsUnsupportedModels) {
  ExpectErrorContains(ParseWith(kLlama3, {{"model_type", "gpt2"}}).status(),
                      {"config.json", "unsupported model_type \"gpt2\"", "llama, mistral, qwen2"});
  ExpectErrorContains(ParseWith(kLlama3, {{"hidden_act", "gelu"}}).status(),
                      {"config.json", "hidden_act \"gelu\" is not supported"});
}

TEST(ModelConfigTest, RejectsInconsistentSizes) {
  ExpectErrorContains(ParseWith(kLlama3, {{"num_key_value_heads", 5}}).status(),
                      {"config.json",
                       "num_attention_heads 32 is not divisible by "
                       "num_key_value_heads 5"});
  ExpectErrorContains(ParseWith(kLlama3, {{"num_attention_heads", 30}}).status(),
                      {"hidden_size 4096 is not divisible by num_attention_heads 30"});
  ExpectErrorContains(ParseWith(kLlama3, {{"head_dim", 63}}).status(),
                      {"head_dim 63 must be even"});
  ExpectErrorContains(ParseWith(kLlama3, {{"vocab_size", 0}}).status(),
                      {"vocab_size must be positive, got 0"});
  ExpectErrorContains(ParseWith(kLlama3, {{"intermediate_size", -1}}).status(),
                      {"intermediate_size must be positive, got -1"});
  ExpectErrorContains(ParseWith(kLlama3, {{"hidden_size", int64_t{1} << 40}}).status(),
                      {"hidden_size 1099511627776 exceeds the limit"});
  ExpectErrorContains(ParseWith(kLlama3, {{"rms_norm_eps", 0.0}}).status(),
                      {"rms_norm_eps must be positive"});
  ExpectErrorContains(ParseWith(kLlama3, {{"rope_theta", -1.0}}).status(),
                      {"rope_theta must be positive"});
  ExpectErrorContains(ParseWith(kMistral, {{"sliding_window", -4}}).status(),
                      {"sliding_window must not be negative"});
}

TEST(ModelConfigTest, TokenIds) {
  ExpectErrorContains(ParseWith(kLlama3, {{"eos_token_id", 200000}}).status(),
                      {"eos_token_id 200000 is outside the vocabulary of 128256"});
  ExpectErrorContains(ParseWith(kLlama3, {{"bos_token_id", -1}}).status(),
                      {"\"bos_token_id\" must be a non-negative 32-bit token id, got -1"});
  ExpectErrorContains(ParseWith(kLlama3, {{"eos_token_id", {1, "2"}}}).status(),
                      {"\"eos_token_id\" must be a non-negative 32-bit token id, got \"2\""});
  auto no_ids = ParseWith(kLlama3, {{"bos_token_id", nullptr}, {"eos_token_id", nullptr}});
  ASSERT_TRUE(no_ids.ok());
  EXPECT_FALSE(no_ids->bos_token_id.has_value());
  EXPECT_TRUE(no_ids->eos_token_ids.empty());
  ExpectRoundTrip(*no_ids, "LlamaForCausalLM");
}

TEST(ModelConfigTest, ValidateChecksFamilyInvariants) {
  auto c = ParseModelConfig(Parse(kLlama3), "config.json");
  ASSERT_TRUE(c.ok());
  ModelConfig llama = *c;
  llama.qkv_bias = true;  // but not o_proj_bias
  ExpectErrorContains(ValidateModelConfig(llama), {"llama's attention_bias"});
  llama = *c;
  llama.sliding_window = 4096;
  ExpectErrorContains(ValidateModelConfig(llama), {"llama has no sliding window"});

  auto q = ParseModelConfig(Parse(kQwen2), "config.json");
  ASSERT_TRUE(q.ok());
  ModelConfig qwen = *q;
  qwen.o_proj_bias = true;
  ExpectErrorContains(ValidateModelConfig(qwen), {"qwen2 has q, k and v biases"});

  ModelConfig mistral = *ParseModelConfig(Parse(kMistral), "config.json");
  mistral.mlp_bias = true;
  ExpectErrorContains(ValidateModelConfig(mistral), {"mistral has no biases"});
  mistral = *ParseModelConfig(Parse(kMistral), "config.json");
  mistral.model_type = "mixtral";
  ExpectErrorContains(ValidateModelConfig(mistral), {"model_type \"mixtral\" is not supported"});
}

TEST(ModelConfigTest, LoadsFromFile) {
  ScratchDir dir;
  const std::string path = dir.File("config.json");
  WriteBytes(path, kQwen2);
  auto c = LoadModelConfig(path);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->model_type, "qwen2");

  WriteBytes(path, R"({"model_type": "qwen2", )");
  ExpectErrorContains(LoadModelConfig(path).status(), {path, "invalid JSON"});
  WriteBytes(path, R"({"model_type": "qwen2"})");
  ExpectErrorContains(LoadModelConfig(path).status(), {path, "missing field \"vocab_size\""});
  Status missing = LoadModelConfig(dir.File("absent.json")).status();
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  ExpectErrorContains(missing, {"absent.json"});
}

}  // namespace
}  // namespace millipede
