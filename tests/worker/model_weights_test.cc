// ModelWeights::FromHost (and Random, which goes through it) on the CPU backend: every fused
// group packed back to back in each weight dtype, the bits those given, and a group of mixed
// dtypes refused by name.
#include "worker/model_weights.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>

#include "tests/worker/engine_test_util.h"
#include "worker/backend/backend_factory.h"

namespace millipede {
namespace {

class ModelWeightsTest : public ::testing::TestWithParam<DType> {};

// What GenerateRandomWeights gives, by name, for comparing bits after the move into groups.
std::map<std::string, std::string> Bytes(const std::vector<NamedHostTensor>& tensors) {
  std::map<std::string, std::string> out;
  for (const NamedHostTensor& t : tensors)
    out[t.name] = std::string(t.tensor.data<char>(), t.tensor.NumBytes());
  return out;
}

std::string Bytes(ConstTensorView v) {
  return std::string(static_cast<const char*>(v.data), v.NumBytes());
}

TEST_P(ModelWeightsTest, FromHostPacksEveryGroupInItsDtype) {
  ModelConfig c = testing::SmallConfig();
  c.model_type = "qwen2";  // q/k/v biases: their group too
  c.qkv_bias = true;
  RandomWeightsOptions options;
  options.dtype = GetParam();
  options.seed = 3;
  auto tensors = GenerateRandomWeights(c, options);
  ASSERT_TRUE(tensors.ok()) << tensors.status().ToString();
  const std::map<std::string, std::string> want = Bytes(*tensors);
  auto backend = CreateBackend(BackendKind::kCpu);
  ASSERT_TRUE(backend.ok()) << backend.status().ToString();
  auto w = ModelWeights::FromHost(c, std::move(tensors).value(), **backend);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_EQ(static_cast<int64_t>((*w)->layers.size()), c.num_hidden_layers);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const LayerWeights& l = (*w)->layers[static_cast<size_t>(i)];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const std::pair<const ConstTensorView*, std::string> parts[] = {
        {&l.q_proj, "self_attn.q_proj.weight"}, {&l.k_proj, "self_attn.k_proj.weight"},
        {&l.v_proj, "self_attn.v_proj.weight"}, {&l.gate_proj, "mlp.gate_proj.weight"},
        {&l.up_proj, "mlp.up_proj.weight"},     {&l.q_bias, "self_attn.q_proj.bias"},
        {&l.k_bias, "self_attn.k_proj.bias"},   {&l.v_bias, "self_attn.v_proj.bias"}};
    for (const auto& [view, name] : parts) {
      EXPECT_EQ(view->dtype, GetParam()) << p + name;
      EXPECT_EQ(Bytes(*view), want.at(p + name)) << p + name;
    }
    // Packed back to back: the fused views exist and hold the parts in order.
    ASSERT_NE(l.qkv_proj.data, nullptr) << "layer " << i;
    ASSERT_NE(l.gate_up_proj.data, nullptr) << "layer " << i;
    ASSERT_NE(l.qkv_bias.data, nullptr) << "layer " << i;
    EXPECT_EQ(Bytes(l.qkv_proj), want.at(p + "self_attn.q_proj.weight") +
                                     want.at(p + "self_attn.k_proj.weight") +
                                     want.at(p + "self_attn.v_proj.weight"));
    EXPECT_EQ(Bytes(l.gate_up_proj),
              want.at(p + "mlp.gate_proj.weight") + want.at(p + "mlp.up_proj.weight"));
  }
}

INSTANTIATE_TEST_SUITE_P(WeightDtypes, ModelWeightsTest,
                         ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

TEST(ModelWeightsMixedTest, AGroupOfMixedDtypesIsRefusedByName) {
  const ModelConfig c = testing::SmallConfig();
  RandomWeightsOptions options;
  options.dtype = DType::kBF16;
  auto tensors = GenerateRandomWeights(c, options);
  ASSERT_TRUE(tensors.ok()) << tensors.status().ToString();
  for (NamedHostTensor& t : *tensors)
    if (t.name == "model.layers.1.self_attn.v_proj.weight")
      t.tensor = HostTensor(DType::kF32, t.tensor.shape());
  auto backend = CreateBackend(BackendKind::kCpu);
  ASSERT_TRUE(backend.ok()) << backend.status().ToString();
  auto w = ModelWeights::FromHost(c, std::move(tensors).value(), **backend);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(w.status().message().find("model.layers.1.self_attn.v_proj.weight is F32"),
            std::string::npos)
      << w.status().ToString();
  EXPECT_NE(w.status().message().find("model.layers.1.self_attn.q_proj.weight BF16"),
            std::string::npos)
      << w.status().ToString();
}

}  // namespace
}  // namespace millipede
