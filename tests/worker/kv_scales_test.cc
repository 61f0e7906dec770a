// Calibrated per-layer FP8 KV scales: the file, the weights they fold into, and an engine whose
// keys and values lie far outside E4M3's range, which an FP8 cache clips without them and keeps
// exactly as the well-scaled model does with them.
#include "worker/kv_scales.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "checkpoint/safetensors_writer.h"
#include "common/file_util.h"
#include "engine_test_util.h"
#include "tests/worker/engine/single_sequence.h"
#include "worker/engine_flags.h"
#include "worker/random_weights.h"

namespace millipede {
namespace {

using testing::MaxRelError;
using testing::RandomEngineOptions;
using testing::RandomIds;
using testing::SmallConfig;

StatusOr<KvScales> Parse(const std::string& text) {
  MP_ASSIGN_OR_RETURN(const Json json, ParseJson(text, "scales.json"));
  return ParseKvScales(json, "scales.json");
}

TEST(KvScalesTest, ScalesAreRoundedUpToPowersOfTwo) {
  auto s = Parse(R"({"k_scale": [1000, 0.25, 0.3, 1], "v_scale": [1, 2.5, 1e-3, 448]})");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->k, (std::vector<float>{1024, 0.25f, 0.5f, 1}));
  EXPECT_EQ(s->v, (std::vector<float>{1, 4, 1.0f / 512, 512}));
  EXPECT_TRUE(CheckKvScales(*s, 4).ok());
  EXPECT_FALSE(CheckKvScales(*s, 3).ok());
  EXPECT_TRUE(CheckKvScales(KvScales{}, 3).ok());  // none
}

TEST(KvScalesTest, BadFilesAreRefusedClearly) {
  const std::pair<const char*, const char*> cases[] = {
      {R"([1, 2])", "expected an object"},
      {R"({"k_scale": [1]})", "\"v_scale\" must be an array"},
      {R"({"k_scale": 1, "v_scale": [1]})", "\"k_scale\" must be an array"},
      {R"({"k_scale": [], "v_scale": []})", "is empty"},
      {R"({"k_scale": [1, 0], "v_scale": [1, 1]})", "k_scale[1] = 0"},
      {R"({"k_scale": [1], "v_scale": [-2]})", "v_scale[0] = -2"},
      {R"({"k_scale": ["1"], "v_scale": [1]})", "k_scale[0] is"},
      {R"({"k_scale": [1e39], "v_scale": [1]})", "outside the float range"},
      {R"({"k_scale": [1, 1], "v_scale": [1]})", "2 k_scale and 1 v_scale"},
      {R"({"k_scale": [1], "v_scale": [1], "scale": 2})", "unknown key \"scale\""},
  };
  for (const auto& [text, message] : cases) {
    auto s = Parse(text);
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_NE(s.status().message().find(message), std::string::npos)
        << text << ": " << s.status().ToString();
  }
  EXPECT_FALSE(ReadKvScalesFile("/nonexistent/scales.json").ok());
}

TEST(KvScalesTest, FactorsFoldIntoTheAttentionWeightsOnly) {
  const KvScales s{{4, 0.5f}, {8, 2}};
  EXPECT_EQ(KvScaleFactor(s, "model.layers.1.self_attn.q_proj.weight"), 0.5f);
  EXPECT_EQ(KvScaleFactor(s, "model.layers.1.self_attn.q_proj.bias"), 0.5f);
  EXPECT_EQ(KvScaleFactor(s, "model.layers.0.self_attn.k_proj.weight"), 0.25f);
  EXPECT_EQ(KvScaleFactor(s, "model.layers.1.self_attn.k_proj.bias"), 2.0f);
  EXPECT_EQ(KvScaleFactor(s, "model.layers.0.self_attn.v_proj.weight"), 0.125f);
  EXPECT_EQ(KvScaleFactor(s, "model.layers.0.self_attn.o_proj.weight"), 8.0f);
  EXPECT_EQ(KvScaleFactor(s, "model.layers.0.self_attn.o_proj.bias"), 1.0f);
  EXPECT_EQ(KvScaleFactor(s, "model.layers.0.mlp.down_proj.weight"), 1.0f);
  EXPECT_EQ(KvScaleFactor(s, "model.layers.2.self_attn.q_proj.weight"), 1.0f);  // no layer 2
  EXPECT_EQ(KvScaleFactor(s, "model.embed_tokens.weight"), 1.0f);
  EXPECT_EQ(KvScaleFactor(KvScales{}, "model.layers.0.self_attn.q_proj.weight"), 1.0f);
}

TEST(KvScalesTest, WeightsScaleExactlyOrNotAtAll) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    HostTensor w(dtype, Shape{4});
    const float values[] = {1.5f, -0.375f, 0.0f, 96.0f};
    for (size_t i = 0; i < 4; ++i) StoreFromFloat(w.data<void>(), dtype, i, values[i]);
    auto scaled = ScaleWeightExactly(AsConst(w.view()), 0.25f, "w");
    ASSERT_TRUE(scaled.ok()) << scaled.status().ToString();
    for (size_t i = 0; i < 4; ++i)
      EXPECT_EQ(LoadAsFloat(scaled->data<void>(), dtype, i), values[i] / 4) << DTypeName(dtype);
  }
  HostTensor big(DType::kF16, Shape{1});
  StoreFromFloat(big.data<void>(), DType::kF16, 0, 60000.0f);
  auto overflow = ScaleWeightExactly(AsConst(big.view()), 2.0f, "model.x");
  ASSERT_FALSE(overflow.ok());
  EXPECT_NE(overflow.status().message().find("model.x times 2 is not exact in F16"),
            std::string::npos)
      << overflow.status().ToString();
  HostTensor tiny(DType::kBF16, Shape{1});
  // The smallest normal times (1 + 2^-7): a sixteenth of it needs bits below bf16's subnormals.
  StoreFromFloat(tiny.data<void>(), DType::kBF16, 0,
                 std::numeric_limits<float>::min() * (1.0f + 1.0f / 128));
  EXPECT_TRUE(ScaleWeightExactly(AsConst(tiny.view()), 2.0f, "w").ok());
  EXPECT_FALSE(ScaleWeightExactly(AsConst(tiny.view()), 1.0f / 16, "w").ok());
}

TEST(KvScalesTest, FlagsNeedAnFp8Cache) {
  const std::string path = std::filesystem::temp_directory_path() /
                           ("millipede_kv_scales_" + std::to_string(::getpid()) + ".json");
  ASSERT_TRUE(WriteStringToFile(path, R"({"k_scale": [2, 2], "v_scale": [1, 1]})").ok());
  auto parse = [&](const char* kv_dtype) {
    std::vector<std::string> args = {"prog", "--model", "m", "--kv-dtype", kv_dtype,
                                     "--kv-scales", path};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    auto flags = Flags::Parse(static_cast<int>(argv.size()), argv.data(), {});
    EXPECT_TRUE(flags.ok());
    return ParseEngineFlags(*flags, 0);
  };
  auto fp8 = parse("fp8");
  ASSERT_TRUE(fp8.ok()) << fp8.status().ToString();
  EXPECT_EQ(fp8->kv_scales.k, (std::vector<float>{2, 2}));
  auto bf16 = parse("bf16");
  ASSERT_FALSE(bf16.ok());
  EXPECT_NE(bf16.status().message().find("--kv-scales needs --kv-dtype fp8"), std::string::npos);
  std::filesystem::remove(path);

  // The scales change the cached rows, so the prefix cache's disk tier must tell them apart.
  EngineOptions plain = RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF8E4M3);
  EngineOptions scaled = plain, other = plain;
  scaled.kv_scales = KvScales{{1.0f / (1 << 20), 2}, {1, 1}};
  other.kv_scales = KvScales{{1.0f / (1 << 21), 2}, {1, 1}};
  EXPECT_NE(WeightsFingerprint(plain), WeightsFingerprint(scaled));
  EXPECT_NE(WeightsFingerprint(scaled), WeightsFingerprint(other));
  EXPECT_EQ(WeightsFingerprint(scaled), WeightsFingerprint(scaled));

  // Engines check the same, and the layer count.
  EngineOptions o = RandomEngineOptions(SmallConfig(), DType::kF32, DType::kBF16);
  o.kv_scales = KvScales{{2, 2}, {1, 1}};
  EXPECT_FALSE(Engine::Create(o).ok());
  o.kv_dtype = DType::kF8E4M3;
  o.kv_scales = KvScales{{2}, {1}};
  auto wrong_layers = Engine::Create(o);
  ASSERT_FALSE(wrong_layers.ok());
  EXPECT_NE(wrong_layers.status().message().find("for a model of 2 layers"), std::string::npos)
      << wrong_layers.status().ToString();
  o.kv_scales = KvScales{{2, 3}, {1, 1}};  // not rounded by ParseKvScales
  auto not_power = Engine::Create(o);
  ASSERT_FALSE(not_power.ok());
  EXPECT_NE(not_power.status().message().find("k_scale[1] = 3 is not a power of two"),
            std::string::npos)
      << not_power.status().ToString();
}

// A model whose keys are 2^16 times and values 2^14 times those of a random model (|k| and |v|
// below 1), with queries and the output projection scaled back (the same function): an FP8
// cache clips its keys and values (E4M3 saturates at 448) unless KV scales bring them back.
class KvScalesEngineTest : public ::testing::Test {
 protected:
  // The factors the large model's queries / keys and values / output projection are scaled by.
  static constexpr float kKeyScale = 1.0f / 65536, kValueScale = 1.0f / 16384;
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("millipede_kv_scales_model_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    RandomWeightsOptions o;
    o.dtype = DType::kF32;
    o.seed = 11;  // RandomEngineOptions' weights
    auto tensors = GenerateRandomWeights(SmallConfig(), o);
    ASSERT_TRUE(tensors.ok());
    std::vector<NamedTensor> views;
    for (NamedHostTensor& t : *tensors) {
      const float factor =
          KvScaleFactor(KvScales{{kKeyScale, kKeyScale}, {kValueScale, kValueScale}}, t.name);
      float* data = t.tensor.data<float>();
      for (int64_t i = 0; i < t.tensor.NumElements(); ++i) data[i] *= factor;
      views.emplace_back(t.name, AsConst(t.tensor.view()));
    }
    ASSERT_TRUE(WriteSafetensors((dir_ / "model.safetensors").string(), views).ok());
    ASSERT_TRUE(WriteStringToFile((dir_ / "config.json").string(),
                                  ModelConfigToJson(SmallConfig()).dump())
                    .ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::vector<float> Logits(const EngineOptions& o, const std::vector<int32_t>& ids) {
    auto engine = Engine::Create(o);
    EXPECT_TRUE(engine.ok()) << engine.status().ToString();
    if (!engine.ok()) return {};
    std::vector<float> logits;
    EXPECT_TRUE(testing::StartSequence(**engine, static_cast<int64_t>(ids.size())).ok());
    const Status s = testing::ForwardToHost(**engine, ids, &logits);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return logits;
  }
  EngineOptions Large(DType kv, KvScales scales = {}) {
    EngineOptions o;
    o.model_path = dir_.string();
    o.kv_dtype = kv;
    o.kv_scales = std::move(scales);
    return o;
  }

  std::filesystem::path dir_;
};

TEST_F(KvScalesEngineTest, ScalesKeepOutOfRangeKeysAndValues) {
  const std::vector<int32_t> ids = RandomIds(24, 97, 12);
  const std::vector<float> reference =
      Logits(RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF32), ids);
  const std::vector<float> small_fp8 =
      Logits(RandomEngineOptions(SmallConfig(), DType::kF32, DType::kF8E4M3), ids);
  const std::vector<float> large_f32 = Logits(Large(DType::kF32), ids);
  const std::vector<float> large_fp8 = Logits(Large(DType::kF8E4M3), ids);
  // 60000 and 10000 round up to the model's 2^16 and 2^14.
  auto scales = Parse(R"({"k_scale": [60000, 65536], "v_scale": [10000, 16384]})");
  ASSERT_TRUE(scales.ok());
  const std::vector<float> scaled_fp8 = Logits(Large(DType::kF8E4M3, *scales), ids);
  ASSERT_FALSE(reference.empty() || large_fp8.empty() || scaled_fp8.empty());
  // The large model is the same function (an F32 cache holds its keys and values exactly).
  EXPECT_LT(MaxRelError(large_f32, reference), 1e-5);
  const double fp8_err = MaxRelError(small_fp8, reference);
  const double clipped_err = MaxRelError(large_fp8, reference);
  EXPECT_LT(fp8_err, 0.1);
  EXPECT_GT(clipped_err, 5 * fp8_err) << "an FP8 cache clips keys of |k| > 448 (error "
                                      << clipped_err << " against " << fp8_err << ")";
  // With the scales, the weights are those of the small model again, bit for bit.
  EXPECT_EQ(MaxRelError(scaled_fp8, small_fp8), 0.0);
}

}  // namespace
}  // namespace millipede
