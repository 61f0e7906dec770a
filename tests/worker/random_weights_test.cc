// The locality option of random weights changes the embeddings and the Q/K projections only.
#include "worker/random_weights.h"

#include <gtest/gtest.h>

#include <cstring>

#include "tests/worker/engine_test_util.h"

namespace millipede {
namespace {

TEST(RandomWeightsTest, LocalityChangesEmbeddingsAndQueryKeyProjectionsOnly) {
  const ModelConfig c = testing::SmallConfig();
  RandomWeightsOptions plain;
  plain.dtype = DType::kF32;
  plain.seed = 5;
  RandomWeightsOptions local = plain;
  local.locality = 12;
  local.head_dim = c.head_dim;
  auto a = GenerateRandomWeights(c, plain);
  auto b = GenerateRandomWeights(c, local);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->size(), b->size());
  for (size_t i = 0; i < a->size(); ++i) {
    const std::string& name = (*a)[i].name;
    const bool changed = name == "model.embed_tokens.weight" ||
                         name.find("q_proj") != std::string::npos ||
                         name.find("k_proj") != std::string::npos;
    const ConstTensorView x = AsConst((*a)[i].tensor.view()), y = AsConst((*b)[i].tensor.view());
    const bool same = std::memcmp(x.data, y.data, x.NumBytes()) == 0;
    EXPECT_EQ(same, !changed) << name;
  }
  local.head_dim = 0;
  EXPECT_FALSE(GenerateRandomWeights(c, local).ok());
}

}  // namespace
}  // namespace millipede
