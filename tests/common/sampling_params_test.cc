#include "common/sampling_params.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

namespace millipede {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(SamplingParamsTest, EdgesOfEveryRangeAreAccepted) {
  EXPECT_TRUE(CheckSamplingParams({}).ok());  // greedy
  EXPECT_TRUE(CheckSamplingParams({0.0f, 0, 1.0f, 0}).ok());
  EXPECT_TRUE(CheckSamplingParams({1e30f, 1 << 30, 1e-30f, ~uint64_t{0}}).ok());
  SamplingParams edges;
  edges.repetition_penalty = 1e-30f;
  edges.presence_penalty = -2.0f;
  edges.frequency_penalty = 2.0f;
  edges.min_p = 1.0f;
  edges.logprobs = kMaxTopLogprobs;
  edges.logit_bias = {{0, -100.0f}, {9, 100.0f}};
  EXPECT_TRUE(CheckSamplingParams(edges, 10).ok());
  EXPECT_TRUE(edges.ProcessesLogits());
  EXPECT_FALSE(SamplingParams{}.ProcessesLogits());
}

TEST(SamplingParamsTest, EachBadFieldIsNamed) {
  struct Bad {
    SamplingParams params;
    std::string field;
  };
  std::vector<Bad> cases = {
      {{-1.0f}, "temperature"},          {{kNaN}, "temperature"},       {{kInf}, "temperature"},
      {{-0.5f, 3, 0.5f}, "temperature"}, {{1.0f, -1}, "top_k"},         {{1.0f, 0, 0.0f}, "top_p"},
      {{1.0f, 0, -0.5f}, "top_p"},       {{1.0f, 0, 1.0001f}, "top_p"}, {{1.0f, 0, kNaN}, "top_p"},
  };
  auto with = [](auto set, const char* field) {
    SamplingParams p;
    set(p);
    return Bad{p, field};
  };
  cases.push_back(with([](SamplingParams& p) { p.repetition_penalty = 0; }, "repetition_penalty"));
  cases.push_back(with([](SamplingParams& p) { p.repetition_penalty = kInf; }, "repetition"));
  cases.push_back(with([](SamplingParams& p) { p.presence_penalty = 2.1f; }, "presence_penalty"));
  cases.push_back(with([](SamplingParams& p) { p.frequency_penalty = kNaN; }, "frequency"));
  cases.push_back(with([](SamplingParams& p) { p.min_p = -0.1f; }, "min_p"));
  cases.push_back(with([](SamplingParams& p) { p.min_p = kNaN; }, "min_p"));
  cases.push_back(with([](SamplingParams& p) { p.logprobs = 21; }, "logprobs"));
  cases.push_back(with([](SamplingParams& p) { p.logprobs = -2; }, "logprobs"));
  cases.push_back(with([](SamplingParams& p) { p.logit_bias = {{-1, 1.0f}}; }, "logit_bias"));
  cases.push_back(with([](SamplingParams& p) { p.logit_bias = {{1, 101.0f}}; }, "logit_bias"));
  cases.push_back(with([](SamplingParams& p) { p.logit_bias = {{1, kNaN}}; }, "logit_bias"));
  cases.push_back(with([](SamplingParams& p) { p.logit_bias = {{1, 1.0f}, {1, 2.0f}}; }, "twice"));
  cases.push_back(with(
      [](SamplingParams& p) {
        for (int32_t i = 0; i <= static_cast<int32_t>(kMaxLogitBiasEntries); ++i)
          p.logit_bias.push_back({i, 0.0f});
      },
      "at most 1024"));
  for (const Bad& bad : cases) {
    const Status status = CheckSamplingParams(bad.params);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << bad.field;
    EXPECT_NE(status.message().find(bad.field), std::string::npos) << status.ToString();
  }
  // Ids are checked against the vocabulary when it is known.
  SamplingParams biased;
  biased.logit_bias = {{10, 1.0f}};
  EXPECT_TRUE(CheckSamplingParams(biased).ok());
  const Status outside = CheckSamplingParams(biased, 10);
  EXPECT_NE(outside.message().find("outside the vocabulary [0, 10)"), std::string::npos)
      << outside.ToString();
}

StatusOr<SamplingParams> FromArgs(std::vector<std::string> args) {
  args.insert(args.begin(), "tool");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  MP_ASSIGN_OR_RETURN(Flags flags, Flags::Parse(static_cast<int>(argv.size()), argv.data(), {}));
  MP_RETURN_IF_ERROR(flags.CheckKnown(SamplingFlagNames()));
  return SamplingParamsFromFlags(flags);
}

TEST(SamplingParamsTest, CommandLineFlags) {
  StatusOr<SamplingParams> p = FromArgs({"--temperature",
                                         "0.7",
                                         "--top-k",
                                         "40",
                                         "--top-p",
                                         "0.9",
                                         "--min-p",
                                         "0.05",
                                         "--repetition-penalty",
                                         "1.2",
                                         "--presence-penalty",
                                         "-1",
                                         "--frequency-penalty",
                                         "0.5",
                                         "--logit-bias",
                                         "42:-100",
                                         "--logit-bias=7:2.5",
                                         "--logprobs",
                                         "3",
                                         "--seed",
                                         "9"});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_FLOAT_EQ(p->temperature, 0.7f);
  EXPECT_EQ(p->top_k, 40);
  EXPECT_FLOAT_EQ(p->min_p, 0.05f);
  EXPECT_FLOAT_EQ(p->repetition_penalty, 1.2f);
  EXPECT_FLOAT_EQ(p->presence_penalty, -1.0f);
  EXPECT_FLOAT_EQ(p->frequency_penalty, 0.5f);
  ASSERT_EQ(p->logit_bias.size(), 2u);
  EXPECT_EQ(p->logit_bias[1].id, 7);
  EXPECT_FLOAT_EQ(p->logit_bias[1].bias, 2.5f);
  EXPECT_EQ(p->logprobs, 3);
  EXPECT_EQ(p->seed, 9u);
  StatusOr<SamplingParams> defaults = FromArgs({});
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->temperature, 0.0f);
  EXPECT_EQ(defaults->logprobs, -1);
  EXPECT_FALSE(defaults->ProcessesLogits());
  for (const auto& [args, fragment] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--logit-bias", "42"}, "ID:BIAS"},
           {{"--logit-bias", "x:1"}, "token id"},
           {{"--logit-bias", "1:200"}, "logit_bias"},
           {{"--logprobs", "21"}, "logprobs"},
           {{"--top-k", "-2"}, "top_k"},
           {{"--min-p", "2"}, "min_p"},
           {{"--presence-penalty", "nan"}, "presence"}}) {
    StatusOr<SamplingParams> bad = FromArgs(args);
    ASSERT_FALSE(bad.ok()) << args[1];
    EXPECT_NE(bad.status().message().find(fragment), std::string::npos) << bad.status().ToString();
  }
}

}  // namespace
}  // namespace millipede
