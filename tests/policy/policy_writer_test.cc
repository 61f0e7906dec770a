// The policy writer: what it writes parses back to the same policy (every pattern, per-head
// parameters, mixed decode roles, the model-wide parameters), uniform layers are written short,
// and an invalid policy is refused without writing a file.
#include "policy/policy_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "common/file_util.h"
#include "policy/attention_policy.h"

namespace millipede {
namespace {

HeadPrefillPolicy Head(PrefillPattern pattern) {
  HeadPrefillPolicy h;
  h.pattern = pattern;
  return h;
}

// Every pattern and role, parameters that differ per head and from the defaults.
AttentionPolicy MixedPolicy() {
  AttentionPolicy p = DensePolicy(5, 3);
  p.dense_below_tokens = 8192;
  p.fp8_attention = true;
  p.filter.top_k = 77;
  p.streaming_head = {16, 96};
  p.static_eviction = {500, 40, 8};
  LayerPolicy& l1 = p.layers[1];
  l1.prefill[0] = Head(PrefillPattern::kVerticalSlash);
  l1.prefill[0].vertical_slash = {32, 30, 800};
  l1.prefill[1] = Head(PrefillPattern::kVerticalSlash);
  l1.prefill[1].vertical_slash = {64, 3500, 100};
  l1.prefill[2] = Head(PrefillPattern::kAShape);
  l1.prefill[2].a_shape = {100, 800};
  l1.decode = {DecodeRole::kFull, DecodeRole::kStreamingHead, DecodeRole::kStreamingHead};
  LayerPolicy& l2 = p.layers[2];
  for (HeadPrefillPolicy& h : l2.prefill) {
    h = Head(PrefillPattern::kBlockSparse);
    h.block_sparse = {32, 12};
  }
  l2.decode.assign(3, DecodeRole::kFilter);
  LayerPolicy& l3 = p.layers[3];
  l3.prefill[1] = Head(PrefillPattern::kAShape);
  l3.prefill[1].a_shape = {8, 64};
  l3.prefill[2] = Head(PrefillPattern::kAShape);
  l3.prefill[2].a_shape = {8, 128};
  l3.decode.assign(3, DecodeRole::kSelected);
  p.layers[4].decode.assign(3, DecodeRole::kStaticEviction);
  return p;
}

TEST(PolicyWriterTest, RoundTripsEveryPatternAndRole) {
  const AttentionPolicy policy = MixedPolicy();
  ASSERT_TRUE(ValidateAttentionPolicy(policy, 5, 3).ok());
  const std::string text = AttentionPolicyToJson(policy);
  StatusOr<AttentionPolicy> back = ParseAttentionPolicy(text, 5, 3, "written");
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << text;
  EXPECT_EQ(*back, policy) << text;
  EXPECT_EQ(back->Summary(), policy.Summary());
}

TEST(PolicyWriterTest, DensePolicyRoundTrips) {
  const AttentionPolicy policy = DensePolicy(2, 4);
  StatusOr<AttentionPolicy> back = ParseAttentionPolicy(AttentionPolicyToJson(policy), 2, 4);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, policy);
  EXPECT_TRUE(back->IsDense());
  // FP8 attention is written only when on, and read back.
  EXPECT_EQ(AttentionPolicyToJson(policy).find("fp8_attention"), std::string::npos);
  AttentionPolicy fp8 = policy;
  fp8.fp8_attention = true;
  back = ParseAttentionPolicy(AttentionPolicyToJson(fp8), 2, 4);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->fp8_attention);
  EXPECT_EQ(back->Summary(), "dense/full (fp8 attention)");
  // A value that is no boolean is refused.
  EXPECT_EQ(ParseAttentionPolicy(R"({"version": 1, "fp8_attention": 1})", 2, 4).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(PolicyWriterTest, OneLinePerLayerAndShortFormsForUniformLayers) {
  const std::string text = AttentionPolicyToJson(MixedPolicy());
  // A uniform layer names one pattern, one parameter object and one role.
  EXPECT_NE(text.find(R"({"layer":2,"prefill":"block-sparse","block_sparse":{"block":32,)"
                      R"("top_blocks":12},"decode":"filter"})"),
            std::string::npos)
      << text;
  // A mixed layer lists one entry per KV head, null for heads of other patterns.
  EXPECT_NE(text.find(R"("prefill":["vertical-slash","vertical-slash","a-shape"])"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(R"("a_shape":[null,null,{"sink_tokens":100,"window_tokens":800}])"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(R"("decode":["full","streaming-head","streaming-head"])"), std::string::npos)
      << text;
  int lines_with_layer = 0;
  for (size_t at = text.find("{\"layer\":"); at != std::string::npos;
       at = text.find("{\"layer\":", at + 1)) {
    ++lines_with_layer;
    EXPECT_EQ(text[at - 1], ' ');
  }
  EXPECT_EQ(lines_with_layer, 5);
}

TEST(PolicyWriterTest, WritesOnlyValidPolicies) {
  const std::string dir = ::testing::TempDir() + "/policy_writer_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string path = JoinPath(dir, "p.json");
  AttentionPolicy bad = MixedPolicy();
  bad.layers[3].prefill[2].a_shape.sink_tokens = 9;  // a layer's a-shape heads share sinks
  Status s = WriteAttentionPolicy(path, bad, 5, 3);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("layer 3"), std::string::npos) << s.ToString();
  EXPECT_FALSE(FileExists(path));
  EXPECT_FALSE(WriteAttentionPolicy(path, MixedPolicy(), 4, 3).ok());  // wrong layer count
  EXPECT_FALSE(FileExists(path));

  ASSERT_TRUE(WriteAttentionPolicy(path, MixedPolicy(), 5, 3).ok());
  StatusOr<AttentionPolicy> loaded = LoadAttentionPolicy(path, 5, 3);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(*loaded, MixedPolicy());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace millipede
