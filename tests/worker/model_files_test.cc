// The engine loading a Hugging Face directory gives the same results as the same weights
// generated in memory; files that do not match the config are refused with a clear error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "checkpoint/safetensors_writer.h"
#include "common/file_util.h"
#include "engine_test_util.h"
#include "tests/worker/engine/single_sequence.h"
#include "worker/random_weights.h"

namespace millipede {
namespace {

using testing::MaxRelError;
using testing::RandomEngineOptions;
using testing::RandomIds;
using testing::SmallConfig;

class ModelFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("millipede_model_files_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Writes config + weights (optionally sharded, optionally without one tensor).
  void WriteModel(const ModelConfig& c, uint64_t shard_bytes, const std::string& drop = "") {
    RandomWeightsOptions o;
    o.dtype = DType::kF32;
    o.seed = 11;
    auto tensors = GenerateRandomWeights(c, o);
    ASSERT_TRUE(tensors.ok());
    std::vector<NamedTensor> views;
    for (const auto& t : *tensors)
      if (t.name != drop) views.emplace_back(t.name, t.tensor.view());
    if (shard_bytes > 0) {
      ASSERT_TRUE(WriteShardedSafetensors(dir_.string(), views, shard_bytes).ok());
    } else {
      ASSERT_TRUE(WriteSafetensors((dir_ / "model.safetensors").string(), views).ok());
    }
    ASSERT_TRUE(
        WriteStringToFile((dir_ / "config.json").string(), ModelConfigToJson(c).dump()).ok());
  }

  std::filesystem::path dir_;
};

TEST_F(ModelFilesTest, LoadedEqualsGenerated) {
  for (uint64_t shard : {uint64_t{0}, uint64_t{20000}}) {
    WriteModel(SmallConfig(), shard);
    EngineOptions from_dir;
    from_dir.model_path = dir_.string();
    from_dir.kv_dtype = DType::kF32;
    auto loaded = Engine::Create(from_dir);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    auto generated = Engine::Create(RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF32));
    ASSERT_TRUE(generated.ok());
    std::vector<int32_t> ids = RandomIds(9, 97, 10);
    std::vector<float> a, b;
    ASSERT_TRUE(testing::StartSequence(**loaded, 9).ok() &&
                testing::StartSequence(**generated, 9).ok());
    ASSERT_TRUE(testing::ForwardToHost(**loaded, ids, &a).ok());
    ASSERT_TRUE(testing::ForwardToHost(**generated, ids, &b).ok());
    EXPECT_EQ(MaxRelError(a, b), 0.0) << "shard bytes " << shard;
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
}

TEST_F(ModelFilesTest, MissingTensorIsNamed) {
  WriteModel(SmallConfig(), 0, "model.layers.1.mlp.up_proj.weight");
  EngineOptions o;
  o.model_path = dir_.string();
  auto e = Engine::Create(o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("model.layers.1.mlp.up_proj.weight"), std::string::npos)
      << e.status().ToString();
}

TEST_F(ModelFilesTest, MissingDirectoryAndConfig) {
  EngineOptions o;
  o.model_path = (dir_ / "nope").string();
  auto e = Engine::Create(o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("config.json"), std::string::npos) << e.status().ToString();
}

}  // namespace
}  // namespace millipede
