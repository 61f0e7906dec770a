// The OpenAI parameters beyond the basics: sampling fields reach the job, options this server
// does not implement are refused naming the field (defaults accepted), Content-Type is checked on
// the JSON endpoints, and every refusal is counted by reason (Submit's own are not counted twice).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/http/test_fixture.h"

namespace millipede::http_test {
namespace {

const char* const kPrompt = "Hello there";

TEST_F(HttpServerTest, SamplingParametersReachTheJob) {
  Json body = {{"prompt", kPrompt},
               {"temperature", 0.8},
               {"repetition_penalty", 1.2},
               {"presence_penalty", -0.5},
               {"frequency_penalty", 1.5},
               {"min_p", 0.05},
               {"logit_bias", {{"7", -100}, {"42", 3.5}}},
               {"stop_token_ids", {3, 9}},
               {"seed", 11},
               {"add_special_tokens", false}};
  ASSERT_EQ(Post("/v1/completions", body).status, 200);
  Json chat = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
               {"stop_token_ids", {12}},
               {"logprobs", true},
               {"top_logprobs", 4}};
  ASSERT_EQ(Post("/v1/chat/completions", chat).status, 200);
  const std::vector<JobRequest> requests = fake_.requests();
  ASSERT_EQ(requests.size(), 2u);
  const SamplingParams& s = requests[0].sampling;
  EXPECT_FLOAT_EQ(s.repetition_penalty, 1.2f);
  EXPECT_FLOAT_EQ(s.presence_penalty, -0.5f);
  EXPECT_FLOAT_EQ(s.frequency_penalty, 1.5f);
  EXPECT_FLOAT_EQ(s.min_p, 0.05f);
  ASSERT_EQ(s.logit_bias.size(), 2u);
  EXPECT_EQ(s.logit_bias[0].id, 42);  // JSON objects keep their keys sorted
  EXPECT_FLOAT_EQ(s.logit_bias[0].bias, 3.5f);
  EXPECT_EQ(s.logit_bias[1].id, 7);
  EXPECT_FLOAT_EQ(s.logit_bias[1].bias, -100.0f);
  EXPECT_EQ(s.logprobs, -1);
  EXPECT_EQ(requests[0].stop_ids, (std::vector<int32_t>{3, 9}));
  EXPECT_FALSE(requests[0].add_bos);
  // Chat keeps its end-of-turn stop id and adds the request's; logprobs with 4 alternatives.
  auto eot = fake_.tokenizer().TokenToId("<|eot_id|>");
  ASSERT_TRUE(eot.has_value());
  EXPECT_EQ(requests[1].stop_ids, (std::vector<int32_t>{*eot, 12}));
  EXPECT_EQ(requests[1].sampling.logprobs, 4);
  // Defaults: nothing on.
  ASSERT_EQ(Post("/v1/completions", Json{{"prompt", kPrompt}}).status, 200);
  const SamplingParams plain = fake_.requests()[2].sampling;
  EXPECT_EQ(plain.repetition_penalty, 1.0f);
  EXPECT_EQ(plain.min_p, 0.0f);
  EXPECT_TRUE(plain.logit_bias.empty());
  EXPECT_FALSE(plain.ProcessesLogits());
}

TEST_F(HttpServerTest, UnsupportedOptionsAreRefusedByName) {
  struct Case {
    const char* endpoint;
    Json extra;
    const char* param;
  };
  const Json messages = {{{"role", "user"}, {"content", "Hi"}}};
  const Case cases[] = {
      {"/v1/completions", {{"use_beam_search", true}}, "use_beam_search"},
      {"/v1/completions", {{"min_tokens", 4}}, "min_tokens"},
      {"/v1/completions", {{"best_of", 3}}, "best_of"},
      {"/v1/completions", {{"suffix", "end"}}, "suffix"},
      {"/v1/completions", {{"guided_json", {{"type", "object"}}}}, "guided_json"},
      {"/v1/completions", {{"guided_choice", {"a", "b"}}}, "guided_choice"},
      {"/v1/completions", {{"prompt_logprobs", 1}}, "prompt_logprobs"},
      {"/v1/completions", {{"allowed_token_ids", {1, 2}}}, "allowed_token_ids"},
      {"/v1/completions", {{"include_stop_str_in_output", true}}, "include_stop_str_in_output"},
      {"/v1/completions", {{"skip_special_tokens", false}}, "skip_special_tokens"},
      {"/v1/completions", {{"top_logprobs", 2}}, "top_logprobs"},
      {"/v1/completions", {{"echo", true}, {"logprobs", 1}}, "echo"},
      {"/v1/completions", {{"response_format", {{"type", "json_object"}}}}, "response_format"},
      {"/v1/completions",
       {{"stream", true}, {"stream_options", {{"continuous_usage_stats", true}}}},
       "stream_options.continuous_usage_stats"},
      {"/v1/chat/completions", {{"tools", {{{"type", "function"}}}}}, "tools"},
      {"/v1/chat/completions", {{"tool_choice", "auto"}}, "tool_choice"},
      {"/v1/chat/completions", {{"echo", true}}, "echo"},
      {"/v1/chat/completions", {{"add_generation_prompt", false}}, "add_generation_prompt"},
      {"/v1/chat/completions", {{"continue_final_message", true}}, "continue_final_message"},
      {"/v1/chat/completions", {{"chat_template", "{{ messages }}"}}, "chat_template"},
      {"/v1/chat/completions", {{"modalities", {"text", "audio"}}}, "modalities"},
  };
  for (const Case& c : cases) {
    Json body = c.extra;
    if (std::string(c.endpoint) == "/v1/completions") {
      body["prompt"] = kPrompt;
    } else {
      body["messages"] = messages;
    }
    SCOPED_TRACE(body.dump());
    Json error = ExpectError(Post(c.endpoint, body), 400, "invalid_request_error");
    EXPECT_EQ(error["param"], c.param);
    EXPECT_EQ(error["code"], "unsupported_parameter");
    EXPECT_NE(error["message"].get<std::string>().find(c.param), std::string::npos);
  }
  EXPECT_TRUE(fake_.requests().empty());
  // The same options at their defaults are accepted.
  Json defaults = {{"prompt", kPrompt},      {"use_beam_search", false},
                   {"min_tokens", 0},        {"best_of", 1},
                   {"suffix", ""},           {"skip_special_tokens", true},
                   {"guided_json", nullptr}, {"allowed_token_ids", Json::array()},
                   {"tool_choice", "none"},  {"response_format", {{"type", "text"}}},
                   {"length_penalty", 1},    {"user", "someone"}};
  EXPECT_EQ(Post("/v1/completions", defaults).status, 200);
  Json chat = {{"messages", messages},
               {"add_generation_prompt", true},
               {"echo", false},
               {"modalities", {"text"}},
               {"tools", Json::array()}};
  EXPECT_EQ(Post("/v1/chat/completions", chat).status, 200);
  // top_logprobs needs logprobs: true.
  Json lonely = {{"messages", messages}, {"top_logprobs", 3}};
  EXPECT_EQ(
      ExpectError(Post("/v1/chat/completions", lonely), 400, "invalid_request_error")["param"],
      "top_logprobs");
}

TEST_F(HttpServerTest, JsonEndpointsCheckTheContentType) {
  const std::string body = Json{{"prompt", kPrompt}}.dump();
  for (const char* path : {"/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"}) {
    SCOPED_TRACE(path);
    Json error = ExpectError(Post(path, body, {{"Content-Type", "text/plain"}}), 415,
                             "invalid_request_error");
    EXPECT_EQ(error["code"], "unsupported_media_type");
    EXPECT_NE(error["message"].get<std::string>().find("text/plain"), std::string::npos);
  }
  EXPECT_EQ(
      Post("/v1/completions", body, {{"Content-Type", "application/json; charset=utf-8"}}).status,
      200);
  EXPECT_EQ(Post("/v1/completions", body, {{"Content-Type", "Application/JSON"}}).status, 200);
  // A body without a declared type is read as JSON.
  EXPECT_EQ(Post("/v1/completions", body, {{"Content-Type", ""}}).status, 200);
  EXPECT_EQ(fake_.requests().size(), 3u);
}

TEST_F(HttpServerTest, EveryRefusalIsCountedByReason) {
  ExpectError(Post("/v1/completions", std::string("{nope")), 400, "invalid_request_error");
  ExpectError(Post("/v1/completions", Json{{"prompt", kPrompt}, {"min_tokens", 3}}), 400,
              "invalid_request_error");
  ExpectError(Post("/v1/completions", Json{{"prompt", kPrompt}, {"model", "gpt-4"}}), 404,
              "invalid_request_error");
  ExpectError(Get("/v1/completions"), 405, "invalid_request_error");
  ExpectError(Get("/nowhere"), 404, "not_found_error");
  ExpectError(Post("/tokenize", Json{{"prompt", kPrompt}}.dump(), {{"Content-Type", "text/csv"}}),
              415, "invalid_request_error");
  ExpectError(Post("/detokenize", Json{{"tokens", {-1}}}), 400, "invalid_request_error");
  // Refusals of the service itself are counted there, not again here.
  fake_.FailNextSubmit(ResourceExhaustedError("queue full"));
  ExpectError(Post("/v1/completions", Json{{"prompt", kPrompt}}), 429, "rate_limit_error");
  // Probes that answer 503 are not refusals.
  fake_.health_.alive = false;
  EXPECT_EQ(Get("/health").status, 503);
  EXPECT_EQ(fake_.refusals(),
            (std::vector<std::string>{"invalid", "unsupported", "not_found", "method_not_allowed",
                                      "not_found", "unsupported_media_type", "invalid"}));
}

class HttpRefusalLimitsTest : public HttpServerTest {
 protected:
  void SetUp() override {
    OpenAiServerOptions options;
    options.max_body_bytes = 512;
    options.api_key = "sk-key";
    StartServer(options);
  }
};

TEST_F(HttpRefusalLimitsTest, OversizedAndUnauthorisedRequestsAreCounted) {
  ExpectError(Post("/v1/completions", Json{{"prompt", kPrompt}}), 401, "authentication_error");
  ExpectError(Post("/tokenize", Json{{"prompt", kPrompt}}), 401, "authentication_error");
  const std::map<std::string, std::string> auth = {{"Authorization", "Bearer sk-key"}};
  ExpectError(Post("/v1/completions", Json{{"prompt", std::string(2000, 'x')}}.dump(), auth), 413,
              "invalid_request_error");
  EXPECT_EQ(fake_.refusals(),
            (std::vector<std::string>{"unauthorized", "unauthorized", "too_large"}));
  // The probes stay open.
  EXPECT_EQ(Get("/health").status, 200);
}

}  // namespace
}  // namespace millipede::http_test
