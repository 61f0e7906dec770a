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
      {"/v1/chat/completions", {{"parallel_tool_calls", false}}, "parallel_tool_calls"},
      {"/v1/chat/completions", {{"reasoning_effort", "low"}}, "reasoning_effort"},
      {"/v1/chat/completions", {{"metadata", {{"k", "v"}}}}, "metadata"},
      {"/v1/chat/completions", {{"store", true}}, "store"},
      {"/v1/chat/completions", {{"service_tier", "flex"}}, "service_tier"},
      {"/v1/chat/completions", {{"web_search_options", Json::object()}}, "web_search_options"},
      {"/v1/chat/completions", {{"verbosity", "low"}}, "verbosity"},
      {"/v1/completions", {{"priority", 1}}, "priority"},
      {"/v1/completions", {{"request_id", "r1"}}, "request_id"},
      {"/v1/completions", {{"prompt_embeds", "AAAA"}}, "prompt_embeds"},
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
               {"tools", Json::array()},
               {"parallel_tool_calls", true},
               {"metadata", Json::object()},
               {"store", false},
               {"service_tier", "auto"},
               {"verbosity", "medium"},
               {"priority", 0},
               {"safety_identifier", "someone"},
               {"prompt_cache_key", "k"}};
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

// Clients that send every field send null for those they leave at the default.
TEST_F(HttpServerTest, NullIsTheDefaultOfEveryOptionalField) {
  const char* const both[] = {
      "model", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "min_p",
      "seed", "repetition_penalty", "presence_penalty", "frequency_penalty", "logit_bias", "stop",
      "stop_token_ids", "ignore_eos", "logprobs", "n", "best_of", "stream", "stream_options",
      "user", "use_beam_search", "length_penalty", "min_tokens", "include_stop_str_in_output",
      "skip_special_tokens", "spaces_between_special_tokens", "truncate_prompt_tokens",
      "prompt_logprobs", "allowed_token_ids", "bad_words", "guided_json", "guided_regex",
      "guided_choice", "guided_grammar", "guided_decoding_backend", "guided_whitespace_pattern",
      "structured_outputs", "logits_processors", "tools", "functions", "tool_choice",
      "function_call", "response_format", "priority", "request_id", "return_tokens_as_token_ids",
      "return_token_ids", "cache_salt", "kv_transfer_params", "vllm_xargs"};
  const char* const completions_only[] = {"suffix", "echo", "top_logprobs", "add_special_tokens",
                                          "prompt_embeds"};
  const char* const chat_only[] = {
      "top_logprobs", "echo", "audio", "prediction", "modalities", "continue_final_message",
      "add_generation_prompt", "add_special_tokens", "chat_template", "chat_template_kwargs",
      "documents", "mm_processor_kwargs", "parallel_tool_calls", "reasoning_effort",
      "include_reasoning", "verbosity", "metadata", "store", "service_tier",
      "web_search_options"};
  Json completion = {{"prompt", kPrompt}};
  Json chat = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
  for (const char* key : both) completion[key] = chat[key] = nullptr;
  for (const char* key : completions_only) completion[key] = nullptr;
  for (const char* key : chat_only) chat[key] = nullptr;
  HttpReply reply = Post("/v1/completions", completion);
  ASSERT_EQ(reply.status, 200) << reply.body;
  reply = Post("/v1/chat/completions", chat);
  ASSERT_EQ(reply.status, 200) << reply.body;
  const std::vector<JobRequest> requests = fake_.requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].max_new_tokens, 16);
  EXPECT_TRUE(requests[0].add_bos);
  EXPECT_EQ(requests[0].sampling.temperature, 1.0f);
  EXPECT_EQ(requests[0].sampling.logprobs, -1);
  EXPECT_TRUE(requests[1].max_new_tokens_to_limit);
  EXPECT_EQ(requests[1].sampling.logprobs, -1);
  // An empty stream_options asks for nothing, with or without stream.
  EXPECT_EQ(Post("/v1/completions", Json{{"prompt", kPrompt}, {"stream_options", Json::object()}})
                .status,
            200);
}

// vLLM takes 2.0 where an integer is expected; 2.5 is an error naming the field.
TEST_F(HttpServerTest, IntegralNumbersAreIntegers) {
  Json body = {{"prompt", {1.0, 2.0, 3.0}}, {"max_tokens", 2.0}, {"n", 2.0},
               {"best_of", 2.0},            {"top_k", 5.0},      {"seed", 7.0},
               {"logprobs", 1.0},           {"stop_token_ids", {3.0}}};
  HttpReply reply = Post("/v1/completions", body);
  ASSERT_EQ(reply.status, 200) << reply.body;
  Json chat = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
               {"max_completion_tokens", 3.0},
               {"logprobs", true},
               {"top_logprobs", 2.0}};
  reply = Post("/v1/chat/completions", chat);
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(Post("/detokenize", Json{{"tokens", {1.0, 2.0}}}).status, 200);
  const std::vector<JobRequest> requests = fake_.requests();
  ASSERT_EQ(requests.size(), 3u);  // n = 2, then the chat
  EXPECT_EQ(requests[0].prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(requests[0].max_new_tokens, 2);
  EXPECT_EQ(requests[0].sampling.top_k, 5);
  EXPECT_EQ(requests[0].sampling.seed, 7u);
  EXPECT_EQ(requests[0].sampling.logprobs, 1);
  EXPECT_EQ(requests[0].stop_ids, (std::vector<int32_t>{3}));
  EXPECT_EQ(requests[2].max_new_tokens, 3);
  EXPECT_FALSE(requests[2].max_new_tokens_to_limit);
  EXPECT_EQ(requests[2].sampling.logprobs, 2);

  struct Case {
    const char* endpoint;
    const char* field;
    Json value;
  };
  const Case cases[] = {
      {"/v1/completions", "max_tokens", 2.5},   {"/v1/completions", "n", 1.5},
      {"/v1/completions", "top_k", 0.5},        {"/v1/completions", "seed", 1e300},
      {"/v1/completions", "logprobs", 1.25},    {"/v1/completions", "stop_token_ids", {2.5}},
      {"/v1/completions", "prompt", {1.0, 2.5}}, {"/v1/completions", "min_tokens", 2.5},
      {"/v1/chat/completions", "max_completion_tokens", 2.5},
      {"/v1/chat/completions", "top_logprobs", 2.5}};
  for (const Case& c : cases) {
    Json request = std::string(c.endpoint) == "/v1/completions"
                       ? Json{{"prompt", kPrompt}}
                       : Json{{"messages", chat["messages"]}, {"logprobs", true}};
    request[c.field] = c.value;
    SCOPED_TRACE(request.dump());
    Json error = ExpectError(Post(c.endpoint, request), 400, "invalid_request_error");
    EXPECT_EQ(error["param"], c.field);
    EXPECT_NE(error["message"].get<std::string>().find(c.field), std::string::npos);
  }
  EXPECT_EQ(fake_.requests().size(), 3u);
}

}  // namespace
}  // namespace millipede::http_test
