// Policy files: defaults, per-layer and per-head entries, parameters, and an error naming the
// place for every kind of bad input.
#include <gtest/gtest.h>

#include "common/policy/attention_policy.h"

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

TEST(AttentionPolicyTest, MinimalFileIsDense) {
  auto p = ParseAttentionPolicy(R"({"version": 1})", 4, 2);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_TRUE(p->IsDense());
  EXPECT_EQ(p->layers.size(), 4u);
  EXPECT_EQ(p->layers[3].prefill.size(), 2u);
  EXPECT_EQ(p->Summary(), "dense/full");
  EXPECT_TRUE(DensePolicy(4, 2).IsDense());
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
  EXPECT_EQ(p->a_shape.sink_tokens, 64);
  EXPECT_EQ(p->a_shape.window_tokens, 2048);
  EXPECT_EQ(p->vertical_slash.vertical, 500);
  EXPECT_EQ(p->vertical_slash.slash, VerticalSlashParams().slash);  // untouched default
  EXPECT_EQ(p->filter.top_k, 1024);
  EXPECT_EQ(p->layers[0].prefill, std::vector<PrefillPattern>(2, PrefillPattern::kDense));
  EXPECT_EQ(p->layers[1].prefill, std::vector<PrefillPattern>(2, PrefillPattern::kAShape));
  EXPECT_EQ(p->layers[2].prefill[0], PrefillPattern::kVerticalSlash);
  EXPECT_EQ(p->layers[2].prefill[1], PrefillPattern::kAShape);  // "streaming" is an alias
  EXPECT_EQ(p->layers[2].decode, DecodeRole::kFilter);
  EXPECT_EQ(p->layers[3].decode, DecodeRole::kSelected);
  EXPECT_EQ(p->layers[3].prefill[0], PrefillPattern::kAShape);  // from the default
  EXPECT_EQ(p->Summary(),
            "prefill a-shape 5, dense 2, vertical-slash 1; decode filter 1, full 2, selected 1");
}

TEST(AttentionPolicyTest, EveryMistakeIsNamed) {
  ExpectErrorMentions(R"({})", "version");
  ExpectErrorMentions(R"({"version": 2})", "version 2");
  ExpectErrorMentions(R"({"version": 1, "layer": []})", "unknown field \"layer\"");
  ExpectErrorMentions(R"({"version": 1, "default": {"prefill": "sparse"}})",
                      "unknown prefill pattern \"sparse\"");
  ExpectErrorMentions(R"({"version": 1, "default": {"decode": "evict"}})",
                      "unknown decode role \"evict\"");
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
  ExpectErrorMentions(R"({"version": 1, "layers": [{"layer": 0, "decode": "x"}]})",
                      "layers[0]");
  ExpectErrorMentions(R"({"version": 1, "layers": {"layer": 0}})", "layers must be a list");
  ExpectErrorMentions(R"({"version": 1, "a_shape": {"window_tokens": 0}})",
                      "a_shape.window_tokens must be positive");
  ExpectErrorMentions(R"({"version": 1, "a_shape": {"window": 10}})", "unknown field \"window\"");
  ExpectErrorMentions(R"({"version": 1, "dense_below_tokens": -5})", "dense_below_tokens");
  ExpectErrorMentions(R"({"version": 1, "version": 1})", "duplicate field \"version\"");
  ExpectErrorMentions(R"({"version": 1)", "policy.json");
  ExpectErrorMentions(R"([1, 2])", "must be a JSON object");
}

TEST(AttentionPolicyTest, NamesRoundTrip) {
  for (PrefillPattern p : {PrefillPattern::kDense, PrefillPattern::kAShape,
                           PrefillPattern::kVerticalSlash, PrefillPattern::kBlockSparse})
    EXPECT_EQ(*ParsePrefillPattern(PrefillPatternName(p)), p);
  for (DecodeRole r : {DecodeRole::kFull, DecodeRole::kFilter, DecodeRole::kSelected,
                       DecodeRole::kStreamingHead, DecodeRole::kStaticEviction})
    EXPECT_EQ(*ParseDecodeRole(DecodeRoleName(r)), r);
}

TEST(AttentionPolicyTest, MissingFileIsAnError) {
  auto p = LoadAttentionPolicy("/nonexistent/policy.json", 2, 2);
  EXPECT_FALSE(p.ok());
}

}  // namespace
}  // namespace millipede
