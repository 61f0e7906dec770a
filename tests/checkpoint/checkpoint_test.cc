#include "checkpoint/checkpoint.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/safetensors_writer.h"
#include "common/json_util.h"
#include "tests/checkpoint/test_util.h"

namespace millipede {
namespace {

using testing::ExpectErrorContains;
using testing::ReadBytes;
using testing::ScratchDir;
using testing::WriteBytes;

// A few tensors of different sizes with distinct contents, kept alive for the views.
struct Tensors {
  std::vector<std::string> names;
  std::vector<HostTensor> owned;
  std::vector<NamedTensor> named;

  void Add(const std::string& name, DType dtype, const Shape& shape) {
    names.push_back(name);
    owned.emplace_back(dtype, shape);
    auto* bytes = owned.back().data<unsigned char>();
    for (size_t i = 0; i < owned.back().NumBytes(); ++i) {
      bytes[i] = static_cast<unsigned char>(i * 7 + owned.size() * 13);
    }
  }
  // Views are taken once all tensors exist, since adding may move the owners.
  const std::vector<NamedTensor>& Views() {
    named.clear();
    for (size_t i = 0; i < owned.size(); ++i)
      named.push_back({names[i], std::as_const(owned[i]).view()});
    return named;
  }
};

Tensors SampleTensors() {
  Tensors t;
  const std::vector<std::pair<std::string, Shape>> specs = {
      {"model.embed_tokens.weight", {16, 8}},
      {"model.layers.0.mlp.up_proj.weight", {12, 8}},
      {"model.layers.0.input_layernorm.weight", {8}},
      {"model.norm.weight", {8}},
      {"lm_head.weight", {16, 8}}};
  for (const auto& [name, shape] : specs) {
    t.Add(name, DType::kBF16, shape);
  }
  return t;
}

void ExpectMatches(const Checkpoint& ckpt, Tensors& t) {
  std::vector<std::string> sorted = t.names;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(ckpt.TensorNames(), sorted);
  for (size_t i = 0; i < t.owned.size(); ++i) {
    ASSERT_TRUE(ckpt.Has(t.names[i]));
    auto view = ckpt.Get(t.names[i]);
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    EXPECT_EQ(view->shape, t.owned[i].shape());
    EXPECT_EQ(view->dtype, t.owned[i].dtype());
    EXPECT_EQ(std::memcmp(view->data, t.owned[i].data<void>(), t.owned[i].NumBytes()), 0);
  }
}

TEST(CheckpointTest, OpensASingleFile) {
  ScratchDir dir;
  Tensors t = SampleTensors();
  ASSERT_TRUE(WriteSafetensors(dir.File("model.safetensors"), t.Views()).ok());
  auto ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ(ckpt->files().size(), 1u);
  ExpectMatches(*ckpt, t);
  EXPECT_FALSE(ckpt->Has("nope"));
  Status missing = ckpt->Get("nope").status();
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  ExpectErrorContains(missing, {"\"nope\""});
}

TEST(CheckpointTest, ShardedRoundTrip) {
  ScratchDir dir;
  Tensors t = SampleTensors();
  // 256-byte embed, 192-byte up_proj, 16, 16, 256: a 300-byte cap gives
  // [embed] [up_proj, ln, norm] [lm_head].
  ASSERT_TRUE(WriteShardedSafetensors(dir.path(), t.Views(), 300, {{"format", "pt"}}).ok());
  for (const char* f : {"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                        "model-00003-of-00003.safetensors", "model.safetensors.index.json"}) {
    EXPECT_TRUE(std::filesystem::exists(dir.File(f))) << f;
  }
  auto index = ParseJson(ReadBytes(dir.File("model.safetensors.index.json")), "index");
  ASSERT_TRUE(index.ok());
  EXPECT_EQ((*index)["metadata"]["total_size"], 256 + 192 + 16 + 16 + 256);
  EXPECT_EQ((*index)["weight_map"]["model.norm.weight"], "model-00002-of-00003.safetensors");
  EXPECT_EQ((*index)["weight_map"]["lm_head.weight"], "model-00003-of-00003.safetensors");

  auto ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ(ckpt->files().size(), 3u);
  EXPECT_EQ(ckpt->files()[1].metadata().at("format"), "pt");
  ExpectMatches(*ckpt, t);
}

TEST(CheckpointTest, OversizedTensorGetsItsOwnShard) {
  ScratchDir dir;
  Tensors t = SampleTensors();
  ASSERT_TRUE(WriteShardedSafetensors(dir.path(), t.Views(), 1).ok());
  auto ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ(ckpt->files().size(), 5u);
  ExpectMatches(*ckpt, t);
}

TEST(CheckpointTest, ShardedWriterRejectsDuplicatesAcrossShards) {
  ScratchDir dir;
  Tensors t = SampleTensors();
  std::vector<NamedTensor> views = t.Views();
  views.push_back(views.front());
  ExpectErrorContains(WriteShardedSafetensors(dir.path(), views, 1),
                      {"duplicate tensor name \"model.embed_tokens.weight\""});
  ExpectErrorContains(WriteShardedSafetensors(dir.path(), {}, 100), {"at least one tensor"});
}

TEST(CheckpointTest, PrefersTheSingleFileLikeTransformers) {
  ScratchDir dir;
  Tensors t = SampleTensors();
  ASSERT_TRUE(WriteShardedSafetensors(dir.path(), t.Views(), 300).ok());
  Tensors one;
  one.Add("only", DType::kF32, {2});
  ASSERT_TRUE(WriteSafetensors(dir.File("model.safetensors"), one.Views()).ok());
  auto ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok());
  EXPECT_EQ(ckpt->TensorNames(), std::vector<std::string>{"only"});
}

TEST(CheckpointTest, NoCheckpointFiles) {
  ScratchDir dir;
  Status s = Checkpoint::Open(dir.path()).status();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  ExpectErrorContains(s, {dir.path(), "model.safetensors", "model.safetensors.index.json"});
}

// Sharded checkpoints whose index is wrong or inconsistent with the shards.
class CheckpointIndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    a_.Add("a", DType::kF32, {2});
    a_.Add("b", DType::kF32, {3});
    b_.Add("c", DType::kI32, {4});
    ASSERT_TRUE(WriteSafetensors(dir_.File("s1.safetensors"), a_.Views()).ok());
    ASSERT_TRUE(WriteSafetensors(dir_.File("s2.safetensors"), b_.Views()).ok());
  }
  Status OpenWithIndex(const std::string& index_json) {
    WriteBytes(index_path_, index_json);
    return Checkpoint::Open(dir_.path()).status();
  }
  void ExpectIndexError(const Status& s, std::initializer_list<std::string_view> parts) {
    ExpectErrorContains(s, {index_path_});
    ExpectErrorContains(s, parts);
  }

  ScratchDir dir_;
  std::string index_path_ = dir_.File("model.safetensors.index.json");
  Tensors a_, b_;
};

TEST_F(CheckpointIndexTest, ValidIndexOpens) {
  Status s = OpenWithIndex(R"({"metadata": {"total_size": 36}, "weight_map":
      {"a": "s1.safetensors", "b": "s1.safetensors", "c": "s2.safetensors"}})");
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST_F(CheckpointIndexTest, MissingShard) {
  Status s = OpenWithIndex(R"({"weight_map": {"a": "s1.safetensors", "b": "s1.safetensors",
      "c": "s3.safetensors"}})");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  ExpectIndexError(s, {"shard \"s3.safetensors\""});
}

TEST_F(CheckpointIndexTest, ShardNamesMustStayInsideTheDirectory) {
  for (const char* bad : {"../s1.safetensors", "sub/s1.safetensors", "/etc/passwd", "..", "."}) {
    Status s = OpenWithIndex(std::string(R"({"weight_map": {"a": ")") + bad + "\"}}");
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    ExpectIndexError(s, {std::string("shard \"") + bad + "\"", "not a plain file name"});
  }
}

TEST_F(CheckpointIndexTest, TensorMissingFromItsShard) {
  Status s = OpenWithIndex(R"({"weight_map": {"a": "s1.safetensors", "b": "s1.safetensors",
      "c": "s1.safetensors"}})");
  ExpectIndexError(s, {"tensor \"c\" is listed in shard \"s1.safetensors\", which does not "
                       "contain it"});
}

TEST_F(CheckpointIndexTest, ShardHoldsAnUnlistedTensor) {
  Status s = OpenWithIndex(R"({"weight_map": {"a": "s1.safetensors", "c": "s2.safetensors"}})");
  ExpectIndexError(s, {"shard \"s1.safetensors\" holds tensor \"b\", which weight_map does not "
                       "list"});
}

TEST_F(CheckpointIndexTest, TensorStoredInTwoShards) {
  Tensors dup;
  dup.Add("a", DType::kF32, {2});
  dup.Add("c", DType::kI32, {4});
  ASSERT_TRUE(WriteSafetensors(dir_.File("s2.safetensors"), dup.Views()).ok());
  Status s = OpenWithIndex(R"({"weight_map": {"a": "s1.safetensors", "b": "s1.safetensors",
      "c": "s2.safetensors"}})");
  ExpectIndexError(s, {"tensor \"a\" is stored in both \"s1.safetensors\" and "
                       "\"s2.safetensors\""});
}

TEST_F(CheckpointIndexTest, MalformedIndexJson) {
  ExpectIndexError(OpenWithIndex(R"({"weight_map": {"a": )"), {"invalid JSON"});
  ExpectIndexError(OpenWithIndex("[]"), {"must be a JSON object"});
  ExpectIndexError(OpenWithIndex(R"({"metadata": {}})"), {"missing \"weight_map\""});
  ExpectIndexError(OpenWithIndex(R"({"weight_map": ["a"]})"), {"\"weight_map\" must be an object"});
  ExpectIndexError(OpenWithIndex(R"({"weight_map": {}})"), {"\"weight_map\" is empty"});
  ExpectIndexError(OpenWithIndex(R"({"weight_map": {"a": 1}})"),
                   {"weight_map entry for tensor \"a\" must be a file name string"});
  ExpectIndexError(OpenWithIndex(R"({"metadata": 5, "weight_map": {"a": "s1.safetensors"}})"),
                   {"\"metadata\" must be an object"});
  ExpectIndexError(OpenWithIndex(R"({"weight_map": {"a": "s1.safetensors",
      "a": "s2.safetensors"}})"),
                   {"duplicate key \"a\" in \"weight_map\""});
}

TEST_F(CheckpointIndexTest, MalformedShardNamesTheShard) {
  WriteBytes(dir_.File("s2.safetensors"), "short");
  Status s = OpenWithIndex(R"({"weight_map": {"a": "s1.safetensors", "b": "s1.safetensors",
      "c": "s2.safetensors"}})");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  ExpectIndexError(s, {"shard \"s2.safetensors\"", "too short"});
}

}  // namespace
}  // namespace millipede
