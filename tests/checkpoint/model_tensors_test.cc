#include "checkpoint/model_tensors.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/safetensors_writer.h"
#include "tests/checkpoint/test_util.h"

namespace millipede {
namespace {

using testing::ExpectErrorContains;
using testing::ScratchDir;

ModelConfig TinyConfig(const std::string& type) {
  ModelConfig c;
  c.model_type = type;
  c.vocab_size = 32;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 6;  // deliberately not hidden / heads
  c.max_position_embeddings = 64;
  c.qkv_bias = type == "qwen2";
  return c;
}

std::map<std::string, Shape> ByName(const std::vector<ExpectedTensor>& v) {
  std::map<std::string, Shape> m;
  for (const ExpectedTensor& e : v) m.emplace(e.name, e.shape);
  return m;
}

TEST(CheckpointConfigMatchTest, ExpectedTensorsOfLlama) {
  ModelConfig c = TinyConfig("llama");
  ASSERT_TRUE(ValidateModelConfig(c).ok()) << ValidateModelConfig(c).ToString();
  std::vector<ExpectedTensor> v = ExpectedModelTensors(c);
  ASSERT_EQ(v.size(), 1u + 2 * 9 + 2);
  EXPECT_EQ(v.front().name, "model.embed_tokens.weight");
  EXPECT_EQ(v.back().name, "lm_head.weight");
  auto m = ByName(v);
  ASSERT_EQ(m.size(), v.size()) << "names must be unique";
  EXPECT_EQ(m.at("model.embed_tokens.weight"), Shape({32, 16}));
  EXPECT_EQ(m.at("model.layers.1.input_layernorm.weight"), Shape({16}));
  EXPECT_EQ(m.at("model.layers.1.self_attn.q_proj.weight"), Shape({24, 16}));
  EXPECT_EQ(m.at("model.layers.1.self_attn.k_proj.weight"), Shape({12, 16}));
  EXPECT_EQ(m.at("model.layers.1.self_attn.v_proj.weight"), Shape({12, 16}));
  EXPECT_EQ(m.at("model.layers.1.self_attn.o_proj.weight"), Shape({16, 24}));
  EXPECT_EQ(m.at("model.layers.0.post_attention_layernorm.weight"), Shape({16}));
  EXPECT_EQ(m.at("model.layers.0.mlp.gate_proj.weight"), Shape({24, 16}));
  EXPECT_EQ(m.at("model.layers.0.mlp.up_proj.weight"), Shape({24, 16}));
  EXPECT_EQ(m.at("model.layers.0.mlp.down_proj.weight"), Shape({16, 24}));
  EXPECT_EQ(m.at("model.norm.weight"), Shape({16}));
  EXPECT_EQ(m.at("lm_head.weight"), Shape({32, 16}));
  EXPECT_EQ(m.count("model.layers.0.self_attn.q_proj.bias"), 0u);
}

TEST(CheckpointConfigMatchTest, BiasesAndTying) {
  ModelConfig qwen = TinyConfig("qwen2");
  qwen.tie_word_embeddings = true;
  auto q = ByName(ExpectedModelTensors(qwen));
  EXPECT_EQ(q.size(), 1u + 2 * 12 + 1);
  EXPECT_EQ(q.at("model.layers.0.self_attn.q_proj.bias"), Shape({24}));
  EXPECT_EQ(q.at("model.layers.0.self_attn.k_proj.bias"), Shape({12}));
  EXPECT_EQ(q.at("model.layers.0.self_attn.v_proj.bias"), Shape({12}));
  EXPECT_EQ(q.count("model.layers.0.self_attn.o_proj.bias"), 0u);
  EXPECT_EQ(q.count("lm_head.weight"), 0u);

  ModelConfig llama = TinyConfig("llama");
  llama.qkv_bias = llama.o_proj_bias = llama.mlp_bias = true;
  auto l = ByName(ExpectedModelTensors(llama));
  EXPECT_EQ(l.size(), 1u + 2 * 16 + 2);
  EXPECT_EQ(l.at("model.layers.1.self_attn.o_proj.bias"), Shape({16}));
  EXPECT_EQ(l.at("model.layers.1.mlp.gate_proj.bias"), Shape({24}));
  EXPECT_EQ(l.at("model.layers.1.mlp.up_proj.bias"), Shape({24}));
  EXPECT_EQ(l.at("model.layers.1.mlp.down_proj.bias"), Shape({16}));
}

// Writes a checkpoint of zeros with the expected tensors, edited by the test.
class CheckpointMatchesConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const ExpectedTensor& e : ExpectedModelTensors(config_)) shapes_[e.name] = e.shape;
  }
  // Writes shapes_ (as BF16, or `dtype` for the tensor named `odd`) and checks it.
  Status WriteAndCheck(const std::string& odd = "", DType dtype = DType::kBF16) {
    std::vector<HostTensor> owned;
    owned.reserve(shapes_.size());
    std::vector<NamedTensor> named;
    for (const auto& [name, shape] : shapes_) {
      owned.emplace_back(name == odd ? dtype : DType::kBF16, shape);
      named.push_back({name, std::as_const(owned.back()).view()});
    }
    Status w = WriteShardedSafetensors(dir_.path(), named, 4096);
    if (!w.ok()) return w;
    auto ckpt = Checkpoint::Open(dir_.path());
    if (!ckpt.ok()) return ckpt.status();
    return CheckCheckpointMatchesConfig(*ckpt, config_);
  }

  ModelConfig config_ = TinyConfig("qwen2");
  std::map<std::string, Shape> shapes_;
  ScratchDir dir_;
};

TEST_F(CheckpointMatchesConfigTest, MatchingCheckpointPasses) {
  Status s = WriteAndCheck();
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST_F(CheckpointMatchesConfigTest, MissingTensor) {
  shapes_.erase("model.layers.1.self_attn.k_proj.bias");
  ExpectErrorContains(WriteAndCheck(), {dir_.path(),
                                        "lacks tensor "
                                        "\"model.layers.1.self_attn.k_proj.bias\" (shape [12])"});
}

TEST_F(CheckpointMatchesConfigTest, WrongShape) {
  shapes_["model.layers.0.mlp.down_proj.weight"] = Shape({24, 16});
  ExpectErrorContains(WriteAndCheck(), {"tensor \"model.layers.0.mlp.down_proj.weight\" has shape "
                                        "[24, 16], expected [16, 24]"});
}

TEST_F(CheckpointMatchesConfigTest, NonFloatWeight) {
  ExpectErrorContains(WriteAndCheck("model.norm.weight", DType::kI16),
                      {"\"model.norm.weight\" has dtype I16"});
}

TEST_F(CheckpointMatchesConfigTest, UnexpectedTensors) {
  shapes_["model.layers.0.self_attn.o_proj.bias"] = Shape({16});
  shapes_["model.layers.9.mlp.up_proj.weight"] = Shape({24, 16});
  ExpectErrorContains(WriteAndCheck(),
                      {"unexpected tensor \"model.layers.0.self_attn.o_proj.bias\" (and 1 more)"});
}

TEST_F(CheckpointMatchesConfigTest, IgnoresRotaryBuffersAndTiedCopies) {
  shapes_["model.layers.0.self_attn.rotary_emb.inv_freq"] = Shape({3});
  shapes_["lm_head.weight"] = Shape({32, 16});
  config_.tie_word_embeddings = true;
  Status s = WriteAndCheck();
  EXPECT_TRUE(s.ok()) << s.ToString();

  shapes_["lm_head.weight"] = Shape({16, 32});
  ExpectErrorContains(WriteAndCheck(),
                      {"\"lm_head.weight\" has shape [16, 32], expected [32, 16]"});
}

}  // namespace
}  // namespace millipede
