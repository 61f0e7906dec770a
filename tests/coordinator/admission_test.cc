#include "coordinator/admission.h"

#include <gtest/gtest.h>

#include "policy/head_groups.h"
#include "tests/coordinator/coordinator_test_util.h"

namespace millipede {
namespace {

AdmissionLimits Limits() {
  AdmissionLimits l;
  l.vocab_size = 256;
  l.context_limit = 100;
  l.kv_capacity_per_rank = 100;
  l.num_workers = 2;
  l.max_prompt_bytes = 1000;
  l.num_layers = 2;
  l.num_kv_heads = 2;
  l.capabilities = {{PrefillPattern::kDense, PrefillPattern::kAShape},
                    {DecodeRole::kFull, DecodeRole::kStreamingHead, DecodeRole::kStaticEviction},
                    /*mixed_decode_layers=*/true};
  return l;
}

JobRequest Ids(int n, int64_t max_new = 1) {
  JobRequest r;
  for (int i = 0; i < n; ++i) r.prompt_ids.push_back(65 + i % 26);
  r.max_new_tokens = max_new;
  return r;
}

void ExpectError(const StatusOr<AdmittedJob>& s, StatusCode code, const std::string& fragment) {
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), code) << s.status().ToString();
  EXPECT_NE(s.status().message().find(fragment), std::string::npos) << s.status().ToString();
}

class AdmissionTest : public ::testing::Test {
 protected:
  std::unique_ptr<Tokenizer> tok_ = coordinator_test::ByteTokenizer();
};

TEST_F(AdmissionTest, TextIsTokenized) {
  JobRequest r;
  r.prompt_text = "hi";
  auto job = AdmitRequest(r, *tok_, Limits());
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->prompt_ids, (std::vector<int32_t>{'h', 'i'}));
  EXPECT_FALSE(job->policy.has_value());  // the workers' own
}

TEST_F(AdmissionTest, ContextLimitIsExclusiveOfThePrompt) {
  EXPECT_TRUE(AdmitRequest(Ids(99, 1), *tok_, Limits()).ok());
  ExpectError(AdmitRequest(Ids(100, 1), *tok_, Limits()), StatusCode::kOutOfRange,
              "at least one generated token must fit");
  ExpectError(AdmitRequest(Ids(101, 1), *tok_, Limits()), StatusCode::kOutOfRange, "101");
  ExpectError(AdmitRequest(Ids(90, 11), *tok_, Limits()), StatusCode::kOutOfRange,
              "exceeds the context limit of 100");
  EXPECT_TRUE(AdmitRequest(Ids(90, 10), *tok_, Limits()).ok());
}

TEST_F(AdmissionTest, KvCapacityPerRank) {
  // 2 ranks: 40 prompt tokens -> 2 chunks of 10 each; 21 new -> 10 decode positions each.
  EXPECT_EQ(KvPositionsPerRank(40, 21, 2), 30);
  EXPECT_EQ(KvPositionsPerRank(41, 1, 2), 22);
  EXPECT_EQ(KvPositionsPerRank(1, 1, 1), 2);
  AdmissionLimits l = Limits();
  l.kv_capacity_per_rank = 29;
  ExpectError(AdmitRequest(Ids(40, 21), *tok_, l), StatusCode::kOutOfRange, "KV");
  l.kv_capacity_per_rank = 30;
  EXPECT_TRUE(AdmitRequest(Ids(40, 21), *tok_, l).ok());
}

// MaxModelLen (the max_model_len the front ends report): every split of it into prompt and
// max_new_tokens is admitted, and one token more is refused for some split — checked by
// admitting every split, over ranks, KV budgets and context limits.
TEST_F(AdmissionTest, MaxModelLenIsTheLargestTotalEverySplitOfWhichIsAdmitted) {
  AdmissionLimits l = Limits();
  l.context_limit = 400;
  l.vocab_size = 256;
  l.max_prompt_bytes = 1 << 20;
  for (int workers : {1, 2, 3, 4}) {
    for (int64_t capacity : {1, 2, 3, 7, 20, 57, 100, 500}) {
      l.num_workers = workers;
      l.kv_capacity_per_rank = capacity;
      const int64_t max_len = MaxModelLen(l);
      SCOPED_TRACE(::testing::Message() << workers << " workers, " << capacity << " per rank: "
                                        << max_len);
      ASSERT_LE(max_len, l.context_limit);
      for (int64_t prompt = 1; prompt < max_len; ++prompt)
        ASSERT_TRUE(AdmitRequest(Ids(static_cast<int>(prompt), max_len - prompt), *tok_, l).ok())
            << "prompt " << prompt;
      bool some_refused = false;
      for (int64_t prompt = 1; prompt <= max_len && !some_refused; ++prompt)
        some_refused =
            !AdmitRequest(Ids(static_cast<int>(prompt), max_len + 1 - prompt), *tok_, l).ok();
      EXPECT_TRUE(some_refused || max_len + 1 < 2);
    }
  }
  // The KV budget binds below the context limit; a large one leaves the context limit.
  l.num_workers = 2;
  l.kv_capacity_per_rank = 100;
  EXPECT_EQ(MaxModelLen(l), 2 * (100 - 2) + 2);
  l.kv_capacity_per_rank = 1000;
  EXPECT_EQ(MaxModelLen(l), 400);
  l.kv_capacity_per_rank = 1;  // not even a one-token prompt fits
  EXPECT_EQ(MaxModelLen(l), 0);
}

// A DuoAttention policy's streaming heads keep only their sinks and window once the job is long
// enough, so its KV costs less than dense: a job too large for dense KV is admitted with it.
TEST_F(AdmissionTest, KvCostFollowsThePolicy) {
  AdmissionLimits l = Limits();
  l.context_limit = 100000;
  l.kv_capacity_per_rank = 1000;
  l.num_workers = 1;
  l.max_step_tokens = 16;
  l.max_prompt_bytes = 1 << 20;
  const std::string duo = R"({"version": 1,
      "default": {"prefill": ["dense", "a-shape"], "decode": ["full", "streaming-head"]},
      "a_shape": {"sink_tokens": 2, "window_tokens": 8},
      "streaming_head": {"sink_tokens": 2, "window_tokens": 8}})";
  ExpectError(AdmitRequest(Ids(1500, 1), *tok_, l), StatusCode::kOutOfRange, "1500 KV positions");
  JobRequest r = Ids(1500, 1);
  r.policy_json = duo;
  auto job = AdmitRequest(r, *tok_, l);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  // Per layer: the full head's 1500 rows and the streaming head's 2 + 2 x 8 + 16, over the 2
  // heads of a dense position, for both layers.
  EXPECT_EQ(job->kv_cost_per_rank, (2 * (1500 + 34) + 3) / 4);
  EXPECT_EQ(AdmitRequest(Ids(50, 1), *tok_, l)->kv_cost_per_rank, 50);
  r = Ids(2100, 1);
  r.policy_json = duo;
  ExpectError(AdmitRequest(r, *tok_, l), StatusCode::kOutOfRange,
              "needs 2100 KV positions on a worker rank (as much memory as 1067 of dense KV)");
  EXPECT_EQ(KvCostPerRank(std::nullopt, 700, 16, 2, 2), 700);
}

// An OmniKV job too large for dense KV that fits with its host-tier candidates' prompt rows in
// the workers' host memory (and one layer's window on the device) is admitted at the whole budget
// when the workers may use a host tier; not otherwise, and not when even that does not fit.
TEST_F(AdmissionTest, OmniKvWithTheHostTierTakesTheWholeBudget) {
  AdmissionLimits l = Limits();
  l.context_limit = 100000;
  l.kv_capacity_per_rank = 1000;
  l.num_workers = 1;
  l.num_layers = 4;
  l.max_step_tokens = 16;
  l.max_prompt_bytes = 1 << 20;
  l.capabilities.decode.push_back(DecodeRole::kFilter);
  l.capabilities.decode.push_back(DecodeRole::kSelected);
  const std::string omnikv = R"({"version": 1, "filter": {"top_k": 8},
      "default": {"decode": "selected"}, "layers": [{"layer": 0, "decode": "filter"}]})";
  JobRequest r = Ids(1200, 1);
  r.policy_json = omnikv;
  ExpectError(AdmitRequest(r, *tok_, l), StatusCode::kOutOfRange, "1200 KV positions");
  l.selected_kv_host = true;
  // Layers 2 and 3 (not 1, right after the filter) in host memory: 4 - 2 + 1 (the window)
  // layers' rows of 1200 positions over 4 layers' = 900 <= 1000.
  auto job = AdmitRequest(r, *tok_, l);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->kv_cost_per_rank, 1000);
  // The workers' own policy counts for a job that brings none.
  JobRequest plain = Ids(1200, 1);
  ExpectError(AdmitRequest(plain, *tok_, l), StatusCode::kOutOfRange, "1200 KV positions");
  l.default_policy = ParseAttentionPolicy(omnikv, 4, 2, "policy").value();
  EXPECT_EQ(AdmitRequest(plain, *tok_, l)->kv_cost_per_rank, 1000);
  // 1500 positions: 1125 > 1000 even so.
  r = Ids(1500, 1);
  r.policy_json = omnikv;
  ExpectError(AdmitRequest(r, *tok_, l), StatusCode::kOutOfRange, "1500 KV positions");
  EXPECT_EQ(HostTierCandidates(*l.default_policy), (std::vector<int64_t>{3, 2}));
}

TEST_F(AdmissionTest, BadInputsAreInvalidArguments) {
  JobRequest empty;
  ExpectError(AdmitRequest(empty, *tok_, Limits()), StatusCode::kInvalidArgument, "empty");
  JobRequest both = Ids(3);
  both.prompt_text = "x";
  ExpectError(AdmitRequest(both, *tok_, Limits()), StatusCode::kInvalidArgument, "not both");
  JobRequest oov = Ids(3);
  oov.prompt_ids[1] = 256;
  ExpectError(AdmitRequest(oov, *tok_, Limits()), StatusCode::kInvalidArgument, "vocabulary");
  oov.prompt_ids[1] = -1;
  ExpectError(AdmitRequest(oov, *tok_, Limits()), StatusCode::kInvalidArgument, "vocabulary");
  ExpectError(AdmitRequest(Ids(3, 0), *tok_, Limits()), StatusCode::kInvalidArgument,
              "max_new_tokens");
  JobRequest hot = Ids(3);
  hot.sampling.temperature = -0.5f;
  ExpectError(AdmitRequest(hot, *tok_, Limits()), StatusCode::kInvalidArgument, "temperature");
  JobRequest top_p = Ids(3);
  top_p.sampling.top_p = 0;
  ExpectError(AdmitRequest(top_p, *tok_, Limits()), StatusCode::kInvalidArgument, "top_p");
  JobRequest bad_text;
  bad_text.prompt_text = "ok \xff";
  ExpectError(AdmitRequest(bad_text, *tok_, Limits()), StatusCode::kInvalidArgument, "UTF-8");
  JobRequest big;
  big.prompt_text = std::string(1001, 'a');
  ExpectError(AdmitRequest(big, *tok_, Limits()), StatusCode::kInvalidArgument, "at most");
  JobRequest stop = Ids(3);
  stop.stop_ids = {300};
  ExpectError(AdmitRequest(stop, *tok_, Limits()), StatusCode::kInvalidArgument, "stop id");
  JobRequest stop_text = Ids(3);
  stop_text.stop_strings = {""};
  ExpectError(AdmitRequest(stop_text, *tok_, Limits()), StatusCode::kInvalidArgument, "stop");
  JobRequest policy = Ids(3);
  policy.policy_json = "{not json";
  ExpectError(AdmitRequest(policy, *tok_, Limits()), StatusCode::kInvalidArgument,
              "attention policy");
  policy.policy_json = "{}";
  ExpectError(AdmitRequest(policy, *tok_, Limits()), StatusCode::kInvalidArgument, "version");
  policy.policy_json = R"({"version": 1, "layers": [{"layer": 2}]})";
  ExpectError(AdmitRequest(policy, *tok_, Limits()), StatusCode::kInvalidArgument, "layer 2");
  policy.policy_json = R"({"version": 1, "default": {"prefill": "vertical-slash"}})";
  ExpectError(AdmitRequest(policy, *tok_, Limits()), StatusCode::kUnimplemented,
              "vertical-slash");
}

TEST_F(AdmissionTest, TextLimitsCountBytesAndCharacters) {
  JobRequest big;
  big.prompt_text = std::string(990, 'a') + "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9";
  // 1002 bytes, 996 characters: the message speaks of the text, not of ids.
  ExpectError(AdmitRequest(big, *tok_, Limits()), StatusCode::kInvalidArgument,
              "the prompt text has 1002 bytes (996 characters); at most 1000 bytes");
  JobRequest ids = Ids(251);
  ExpectError(AdmitRequest(ids, *tok_, Limits()), StatusCode::kInvalidArgument,
              "251 ids; at most 250");
}

TEST_F(AdmissionTest, BosAndTheRestOfTheContext) {
  // A tokenizer with a BOS (id 256) from its template.
  Json j = tokenizer_test::ByteLevelTokenizerJson({});
  j["added_tokens"] = {tokenizer_test::AddedTokenJson(256, "<s>", true)};
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single",
       {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"pair", Json::array()},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {256}}, {"tokens", {"<s>"}}}}}}};
  auto bos_tokenizer = Tokenizer::FromJson(j.dump(), "bos");
  ASSERT_TRUE(bos_tokenizer.ok()) << bos_tokenizer.status().ToString();
  AdmissionLimits l = Limits();
  l.vocab_size = 257;
  JobRequest r;
  r.prompt_text = "hi";
  r.add_bos = true;
  auto job = AdmitRequest(r, **bos_tokenizer, l);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->prompt_ids, (std::vector<int32_t>{256, 'h', 'i'}));
  r.add_bos = false;
  EXPECT_EQ(AdmitRequest(r, **bos_tokenizer, l)->prompt_ids, (std::vector<int32_t>{'h', 'i'}));
  // The rest of the context: 100 - 3 = 97 by the context; the KV budget (2 ranks of 100:
  // 2 x 1 prompt positions, then 2 x 98 decode positions + 1) allows more.
  r.add_bos = true;
  r.max_new_tokens = 0;
  r.max_new_tokens_to_limit = true;
  EXPECT_EQ(AdmitRequest(r, **bos_tokenizer, l)->max_new_tokens, 97);
  // max_new_tokens >= 1 caps it (a chat's default cap); past the rest it gives way.
  r.max_new_tokens = 40;
  EXPECT_EQ(AdmitRequest(r, **bos_tokenizer, l)->max_new_tokens, 40);
  r.max_new_tokens = 500;
  EXPECT_EQ(AdmitRequest(r, **bos_tokenizer, l)->max_new_tokens, 97);
  r.max_new_tokens = 0;
  // A smaller KV budget decides: 10 per rank leave 2 x (10 - 2) + 1 = 17 new tokens.
  l.kv_capacity_per_rank = 10;
  job = AdmitRequest(r, **bos_tokenizer, l);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->max_new_tokens, 17);
  EXPECT_EQ(KvPositionsPerRank(3, 17, 2), 10);
  EXPECT_GT(KvPositionsPerRank(3, 18, 2), 10);
  // A prompt that leaves nothing gets the error naming the numbers.
  l.kv_capacity_per_rank = 1;
  ExpectError(AdmitRequest(r, **bos_tokenizer, l), StatusCode::kOutOfRange, "KV");
}

TEST_F(AdmissionTest, SamplingIsCheckedAgainstTheVocabulary) {
  JobRequest r = Ids(3);
  r.sampling.logit_bias = {{255, -100.0f}};
  r.sampling.repetition_penalty = 1.1f;
  r.sampling.min_p = 0.1f;
  r.sampling.logprobs = 20;
  EXPECT_TRUE(AdmitRequest(r, *tok_, Limits()).ok());
  r.sampling.logit_bias = {{256, 1.0f}};
  ExpectError(AdmitRequest(r, *tok_, Limits()), StatusCode::kInvalidArgument,
              "logit_bias token id 256 is outside the vocabulary");
  r.sampling.logit_bias = {{3, 1.0f}, {3, 2.0f}};
  ExpectError(AdmitRequest(r, *tok_, Limits()), StatusCode::kInvalidArgument, "twice");
  r.sampling.logit_bias.clear();
  r.sampling.presence_penalty = 2.5f;
  ExpectError(AdmitRequest(r, *tok_, Limits()), StatusCode::kInvalidArgument, "presence_penalty");
  r.sampling.presence_penalty = 0;
  r.sampling.logprobs = 21;
  ExpectError(AdmitRequest(r, *tok_, Limits()), StatusCode::kInvalidArgument, "logprobs");
}

TEST_F(AdmissionTest, PoliciesTheWorkersRunAreAdmittedParsed) {
  JobRequest r = Ids(3);
  r.policy_json = R"({"version": 1, "default": {"prefill": "a-shape", "decode": "full"},
      "layers": [{"layer": 1, "a_shape": [{"window_tokens": 7}, null],
                  "decode": ["streaming-head", "full"]}]})";
  auto job = AdmitRequest(r, *tok_, Limits());
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  // What the workers are sent is the parsed policy, per head.
  ASSERT_TRUE(job->policy.has_value());
  EXPECT_EQ(job->policy->layers.size(), 2u);
  EXPECT_EQ(job->policy->layers[1].prefill[0].pattern, PrefillPattern::kAShape);
  EXPECT_EQ(job->policy->layers[1].prefill[0].a_shape.window_tokens, 7);
  EXPECT_EQ(job->policy->layers[1].prefill[1].a_shape.window_tokens, 4096);
  EXPECT_EQ(job->policy->layers[1].decode[0], DecodeRole::kStreamingHead);
  EXPECT_EQ(job->prompt_ids, r.prompt_ids);
}

TEST_F(AdmissionTest, PoliciesTheWorkersDoNotRunAreRefusedByWhatTheyReported) {
  JobRequest r = Ids(3);
  r.policy_json = R"({"version": 1, "layers": [{"layer": 1, "prefill": ["dense", "a-shape"]}]})";
  // Workers that reported dense prefill only (whatever their backend).
  AdmissionLimits dense_prefill = Limits();
  dense_prefill.capabilities.prefill = {PrefillPattern::kDense};
  ExpectError(AdmitRequest(r, *tok_, dense_prefill), StatusCode::kUnimplemented,
              "prefill pattern \"a-shape\" (layer 1, KV head 1) is not available yet on these "
              "workers; they run dense");
  // A decode role one KV head asks for.
  r.policy_json =
      R"({"version": 1, "layers": [{"layer": 0, "decode": ["full", "streaming-head"]}]})";
  AdmissionLimits full_only = Limits();
  full_only.capabilities.decode = {DecodeRole::kFull};
  ExpectError(AdmitRequest(r, *tok_, full_only), StatusCode::kUnimplemented,
              "decode role \"streaming-head\" (layer 0, KV head 1)");
  EXPECT_TRUE(AdmitRequest(r, *tok_, Limits()).ok());
  // Workers that run one decode role per layer refuse a layer that mixes them.
  AdmissionLimits one_role = Limits();
  one_role.capabilities.mixed_decode_layers = false;
  ExpectError(AdmitRequest(r, *tok_, one_role), StatusCode::kUnimplemented,
              "layer 0 mixes decode roles per KV head");
  // Workers that reported nothing run no policy at all, not even an explicit dense one; a job
  // without a policy is theirs to run as they do.
  AdmissionLimits none = Limits();
  none.capabilities = {};
  r.policy_json = R"({"version": 1})";
  ExpectError(AdmitRequest(r, *tok_, none), StatusCode::kUnimplemented, "they run none");
  r.policy_json.clear();
  EXPECT_TRUE(AdmitRequest(r, *tok_, none).ok());
  // The rules are checked at admission too.
  r.policy_json = R"({"version": 1, "layers": [{"layer": 0, "decode": ["filter", "full"]}]})";
  ExpectError(AdmitRequest(r, *tok_, Limits()), StatusCode::kInvalidArgument,
              "the attention policy: layer 0, KV head 1: decode role \"full\" beside \"filter\"");
}

}  // namespace
}  // namespace millipede
