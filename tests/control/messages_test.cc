#include "control/messages.h"

#include <gtest/gtest.h>

namespace millipede::control {
namespace {

// A policy that uses every part of the format: per-head patterns and parameters, mixed decode
// roles, a layer-wide role, the model-wide parameters.
AttentionPolicy SomePolicy() {
  auto p = ParseAttentionPolicy(R"({"version": 1, "dense_below_tokens": 77, "fp8_attention": true,
      "filter": {"top_k": 99}, "streaming_head": {"sink_tokens": 3, "window_tokens": 30},
      "static_eviction": {"keep_tokens": 5, "recent_tokens": 6, "observed_queries": 7},
      "layers": [
        {"layer": 0, "prefill": ["a-shape", "vertical-slash", "block-sparse"],
         "a_shape": [{"sink_tokens": 2, "window_tokens": 9}, null, null],
         "vertical_slash": [null, {"vertical": 11, "slash": 12}, null],
         "block_sparse": [null, null, {"top_blocks": 13}],
         "decode": ["full", "streaming-head", "full"]},
        {"layer": 1, "prefill": ["dense", "antidiagonal", "dense"],
         "antidiagonal": [null, {"block": 64, "stride": 4, "mass_permille": 850}, null],
         "decode": "filter"}]})",
                                2, 3);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return *p;
}

JobDescriptor SomeJob() {
  JobDescriptor d;
  d.job_id = 42;
  d.prompt_ids = {1, 2, 3, 500};
  d.max_new_tokens = 17;
  d.sampling.temperature = 0.7f;
  d.sampling.top_k = 5;
  d.sampling.top_p = 0.9f;
  d.sampling.seed = 1ull << 40;
  d.sampling.repetition_penalty = 1.3f;
  d.sampling.presence_penalty = -0.5f;
  d.sampling.frequency_penalty = 1.5f;
  d.sampling.min_p = 0.05f;
  d.sampling.logit_bias = {{3, -100.0f}, {499, 2.5f}};
  d.sampling.logprobs = 20;
  d.stop_ids = {7};
  d.ignore_eos = true;
  return d;
}

TEST(ControlMessagesTest, JobDescriptorRoundTrips) {
  const JobDescriptor d = SomeJob();
  JobDescriptor back;
  back.policy = DensePolicy(1, 1);  // a stale value must not survive the decode
  ASSERT_TRUE(Decode(Encode(d), &back).ok());
  EXPECT_EQ(back.job_id, 42u);
  EXPECT_EQ(back.prompt_ids, d.prompt_ids);
  EXPECT_EQ(back.max_new_tokens, 17);
  EXPECT_EQ(back.sampling.temperature, 0.7f);
  EXPECT_EQ(back.sampling.top_k, 5);
  EXPECT_EQ(back.sampling.top_p, 0.9f);
  EXPECT_EQ(back.sampling.seed, 1ull << 40);
  EXPECT_EQ(back.sampling.repetition_penalty, 1.3f);
  EXPECT_EQ(back.sampling.presence_penalty, -0.5f);
  EXPECT_EQ(back.sampling.frequency_penalty, 1.5f);
  EXPECT_EQ(back.sampling.min_p, 0.05f);
  ASSERT_EQ(back.sampling.logit_bias.size(), 2u);
  EXPECT_EQ(back.sampling.logit_bias[1].id, 499);
  EXPECT_EQ(back.sampling.logit_bias[1].bias, 2.5f);
  EXPECT_EQ(back.sampling.logprobs, 20);
  EXPECT_EQ(back.stop_ids, d.stop_ids);
  EXPECT_TRUE(back.ignore_eos);
  EXPECT_FALSE(back.policy.has_value());
}

TEST(ControlMessagesTest, TheJobsPolicyTravelsWhole) {
  JobDescriptor d = SomeJob();
  d.policy = SomePolicy();
  JobDescriptor back;
  Status s = Decode(Encode(d), &back);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(back.policy.has_value());
  EXPECT_EQ(*back.policy, *d.policy);
  EXPECT_EQ(back.policy->layers[0].prefill[1].vertical_slash.slash, 12);
  EXPECT_TRUE(back.policy->layers[0].MixedDecode());
  EXPECT_EQ(back.prompt_ids, d.prompt_ids);
}

TEST(ControlMessagesTest, EventsHelloAndStatsRoundTrip) {
  StepDone done;
  done.step_id = 41;
  done.seconds = 0.5;
  StepJobResult failed;
  failed.job_id = 9;
  failed.outcome = StepOutcome::kFailed;
  failed.status_code = 7;
  failed.message = "out of memory";
  StepJobResult token;
  token.job_id = 10;
  token.outcome = StepOutcome::kToken;
  token.token = 12;
  token.logprob = -0.25f;
  token.top_ids = {12, 40};
  token.top_logprobs = {-0.25f, -2.0f};
  token.finished = true;
  token.finished_by_stop = true;
  done.jobs = {failed, token};
  StepDone db;
  ASSERT_TRUE(Decode(Encode(done), &db).ok());
  EXPECT_EQ(db.step_id, 41u);
  EXPECT_EQ(db.seconds, 0.5);
  ASSERT_EQ(db.jobs.size(), 2u);
  EXPECT_EQ(db.jobs[0].outcome, StepOutcome::kFailed);
  EXPECT_EQ(db.jobs[0].message, "out of memory");
  EXPECT_EQ(db.jobs[0].status_code, 7);
  EXPECT_EQ(db.jobs[1].logprob, -0.25f);
  EXPECT_EQ(db.jobs[1].top_ids, token.top_ids);
  EXPECT_EQ(db.jobs[1].top_logprobs, token.top_logprobs);
  EXPECT_TRUE(db.jobs[1].finished && db.jobs[1].finished_by_stop);
  // Alternatives whose ids and log-probabilities do not pair up, or too many, are refused.
  done.jobs[1].top_logprobs.pop_back();
  EXPECT_FALSE(Decode(Encode(done), &db).ok());
  done.jobs[1].top_ids.assign(kMaxTopLogprobs + 1, 1);
  done.jobs[1].top_logprobs.assign(kMaxTopLogprobs + 1, -1.0f);
  EXPECT_FALSE(Decode(Encode(done), &db).ok());

  JobProgress progress{.job_id = 3, .tokens_done = 100, .tokens_total = 400};
  JobProgress pb;
  ASSERT_TRUE(Decode(Encode(progress), &pb).ok());
  EXPECT_EQ(pb.tokens_done, 100);
  EXPECT_EQ(pb.tokens_total, 400);

  WorkerHello h;
  h.rank = 2;
  h.vocab_size = 128256;
  h.max_context = 1 << 20;
  h.kv_capacity_tokens = 123;
  h.eos_ids = {128001, 128009};
  h.backend = "cuda";
  h.num_layers = 32;
  h.num_kv_heads = 8;
  h.capabilities = {{PrefillPattern::kDense, PrefillPattern::kBlockSparse},
                    {DecodeRole::kFull, DecodeRole::kStreamingHead, DecodeRole::kStaticEviction},
                    /*mixed_decode_layers=*/true,
                    /*fp8_attention=*/true};
  WorkerHello hb;
  ASSERT_TRUE(Decode(Encode(h), &hb).ok());
  EXPECT_EQ(hb.eos_ids, h.eos_ids);
  EXPECT_EQ(hb.backend, "cuda");
  EXPECT_EQ(hb.kv_capacity_tokens, 123);
  EXPECT_EQ(hb.num_kv_heads, 8);
  EXPECT_EQ(hb.capabilities, h.capabilities);

  WorkerStats s;
  s.rank = 1;
  s.kv_bytes_host = 4096;
  s.comm_s = 1.5;
  s.promoted = {9, 4};
  s.promote_failed = {12};
  WorkerStats sb;
  ASSERT_TRUE(Decode(Encode(s), &sb).ok());
  EXPECT_EQ(sb.kv_bytes_host, 4096);
  EXPECT_EQ(sb.comm_s, 1.5);
  EXPECT_EQ(sb.promoted, s.promoted);
  EXPECT_EQ(sb.promote_failed, s.promote_failed);
}

TEST(ControlMessagesTest, AStepPlanRoundTripsAndChecksItsStarts) {
  StepPlan plan;
  plan.step_id = 7;
  plan.ends = {3, 4};
  plan.starts.push_back({SomeJob(), 1000, 256});
  plan.starts[0].job.policy = SomePolicy();
  plan.entries = {{5, StepEntryKind::kPrefill, 512, 256}, {4, StepEntryKind::kDecode, 90, 1}};
  plan.promotes = {11, 2};
  StepPlan back;
  Status s = Decode(Encode(plan), &back);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(back.ends, plan.ends);
  EXPECT_EQ(back.promotes, plan.promotes);
  ASSERT_EQ(back.starts.size(), 1u);
  EXPECT_EQ(back.starts[0].capacity_per_rank, 1000);
  EXPECT_EQ(back.starts[0].step_tokens, 256);
  EXPECT_EQ(back.starts[0].job.prompt_ids, plan.starts[0].job.prompt_ids);
  EXPECT_EQ(*back.starts[0].job.policy, *plan.starts[0].job.policy);
  ASSERT_EQ(back.entries.size(), 2u);
  EXPECT_EQ(back.entries[0].kind, StepEntryKind::kPrefill);
  EXPECT_EQ(back.entries[0].begin, 512);
  EXPECT_EQ(back.entries[1].kind, StepEntryKind::kDecode);
  // A starting job's sampling parameters are checked as a lone descriptor's are.
  plan.starts[0].job.sampling.frequency_penalty = 3.0f;
  EXPECT_NE(Decode(Encode(plan), &back).message().find("frequency_penalty"), std::string::npos);
}

TEST(ControlMessagesTest, TruncatedOrPaddedMessagesAreRefused) {
  JobDescriptor d;
  d.prompt_ids = {1, 2, 3};
  d.policy = SomePolicy();
  std::vector<char> bytes = Encode(d);
  JobDescriptor back;
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<char> cut(bytes.begin(), bytes.begin() + static_cast<long>(n));
    EXPECT_FALSE(Decode(cut, &back).ok()) << n;
  }
  bytes.push_back(0);
  EXPECT_FALSE(Decode(bytes, &back).ok());
  // A length field larger than the message must not allocate or read past the end.
  std::vector<char> huge(16, '\xff');
  EXPECT_FALSE(Decode(huge, &back).ok());

  WorkerHello h;
  h.capabilities = {{PrefillPattern::kDense}, {DecodeRole::kFull}};
  const std::vector<char> hello = Encode(h);
  WorkerHello hb;
  for (size_t n = 0; n < hello.size(); ++n) {
    std::vector<char> cut(hello.begin(), hello.begin() + static_cast<long>(n));
    EXPECT_FALSE(Decode(cut, &hb).ok()) << n;
  }
}

TEST(ControlMessagesTest, ValuesOutOfRangeAreRefused) {
  // Where the policy starts: after the descriptor's fields and the presence byte.
  JobDescriptor d = SomeJob();
  const size_t policy_at = Encode(d).size();
  d.policy = SomePolicy();
  const std::vector<char> good = Encode(d);
  JobDescriptor back;
  auto decode_with = [&](size_t at, char value) {
    std::vector<char> bytes = good;
    bytes[at] = value;
    Status s = Decode(bytes, &back);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    return s.message();
  };
  // The presence byte is a bool: 0 or 1.
  EXPECT_NE(decode_with(policy_at - 1, 2).find("a bool field holds 2"), std::string::npos);
  // The first head's pattern (after the layer count and the head count).
  const size_t pattern_at = policy_at + 8 + 8;
  ASSERT_EQ(good[pattern_at], static_cast<char>(PrefillPattern::kAShape));
  EXPECT_NE(decode_with(pattern_at, kNumPrefillPatterns).find("outside [0, 4]"), std::string::npos);
  // Another pattern in range decodes: the head's vertical-slash parameters are the defaults.
  std::vector<char> other = good;
  other[pattern_at] = static_cast<char>(PrefillPattern::kVerticalSlash);
  ASSERT_TRUE(Decode(other, &back).ok());
  EXPECT_EQ(back.policy->layers[0].prefill[0].pattern, PrefillPattern::kVerticalSlash);
  // A policy that breaks a rule is refused after the decode, naming the place: a layer that
  // mixes filter with full ...
  JobDescriptor mixed = SomeJob();
  mixed.policy = SomePolicy();
  mixed.policy->layers[1].decode[2] = DecodeRole::kFull;
  Status s = Decode(Encode(mixed), &back);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("the job's attention policy: layer 1, KV head 2"), std::string::npos)
      << s.ToString();
  // ... heads of a layer that disagree on the sink count, a layer with a head missing.
  mixed.policy = SomePolicy();
  mixed.policy->layers[1].prefill[0].pattern = PrefillPattern::kAShape;
  mixed.policy->layers[1].prefill[2].pattern = PrefillPattern::kAShape;
  mixed.policy->layers[1].prefill[2].a_shape.sink_tokens = 1;
  EXPECT_NE(Decode(Encode(mixed), &back).message().find("different sink_tokens"),
            std::string::npos);
  mixed.policy = SomePolicy();
  mixed.policy->layers[1].decode.pop_back();
  EXPECT_NE(Decode(Encode(mixed), &back).message().find("layer 1 has 2 decode roles for 3"),
            std::string::npos);
  mixed.policy->layers.clear();
  EXPECT_FALSE(Decode(Encode(mixed), &back).ok());

  // Sampling parameters out of range (a logit bias beyond 100, a penalty beyond 2) are refused.
  JobDescriptor bad_sampling = SomeJob();
  bad_sampling.sampling.logit_bias[0].bias = 1000.0f;
  EXPECT_NE(Decode(Encode(bad_sampling), &back).message().find("logit_bias"), std::string::npos);
  bad_sampling = SomeJob();
  bad_sampling.sampling.frequency_penalty = 3.0f;
  EXPECT_NE(Decode(Encode(bad_sampling), &back).message().find("frequency_penalty"),
            std::string::npos);

  // Step outcomes and capabilities are checked the same way.
  StepDone done;
  done.jobs.resize(1);
  std::vector<char> event = Encode(done);
  event[8 + 4 + 8 + 8 + 8] = 9;  // step id, status, empty message, job count, job id
  StepDone db;
  EXPECT_NE(Decode(event, &db).message().find("outside [1, 3]"), std::string::npos);
  WorkerHello h;
  h.capabilities = {{PrefillPattern::kDense}, {DecodeRole::kFull}};
  std::vector<char> hello = Encode(h);
  // The one decode role, before the two flags (mixed decode layers, FP8 attention).
  hello[hello.size() - 3] = static_cast<char>(kNumDecodeRoles);
  WorkerHello hb;
  EXPECT_NE(Decode(hello, &hb).message().find("outside [0, 4]"), std::string::npos);
}

}  // namespace
}  // namespace millipede::control
