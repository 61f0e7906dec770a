// The HTTP server's routes, error shapes and codes, limits, API key and readiness.
#include <gtest/gtest.h>

#include <string>

#include "tests/http/test_fixture.h"

namespace millipede::http_test {
namespace {

const char* const kPrompt = "Hello there";

TEST_F(HttpServerTest, HealthAndModels) {
  HttpReply health = Get("/health?probe=1");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.json()["status"], "ok");

  HttpReply models = Get("/v1/models");
  ASSERT_EQ(models.status, 200) << models.body;
  EXPECT_EQ(models.headers["Content-Type"], "application/json");
  Json list = models.json();
  EXPECT_EQ(list["object"], "list");
  ASSERT_EQ(list["data"].size(), 1u);
  EXPECT_EQ(list["data"][0]["id"], "fake-model");
  EXPECT_EQ(list["data"][0]["object"], "model");
  // What the service reports one job may hold (ModelInfo::max_model_len, here below the
  // context limit), and the vocabulary's size.
  EXPECT_EQ(list["data"][0]["max_model_len"], 3000);
  EXPECT_EQ(list["data"][0]["vocab_size"], fake_.tokenizer().vocab_size());
  EXPECT_GT(list["data"][0]["vocab_size"].get<int64_t>(), 0);

  Json one = Get("/v1/models/fake-model").json();
  EXPECT_EQ(one["id"], "fake-model");
  EXPECT_EQ(one["max_model_len"], 3000);
  EXPECT_EQ(one["vocab_size"], fake_.tokenizer().vocab_size());
  Json error = ExpectError(Get("/v1/models/gpt-4"), 404, "invalid_request_error");
  EXPECT_EQ(error["code"], "model_not_found");
}

TEST_F(HttpServerTest, HealthReportsADeadService) {
  fake_.health_.alive = false;
  fake_.health_.detail = "worker 2 exited";
  Json error = ExpectError(Get("/health"), 503, "service_unavailable_error");
  EXPECT_NE(error["message"].get<std::string>().find("worker 2 exited"), std::string::npos);
}

TEST_F(HttpServerTest, UnknownRoutesAndWrongMethods) {
  Json error = ExpectError(Get("/v2/nothing"), 404, "not_found_error");
  EXPECT_EQ(error["code"], "unknown_route");
  ExpectError(Post("/v1/embeddings", std::string("{}")), 404, "not_found_error");

  HttpReply get_completions = Get("/v1/completions");
  error = ExpectError(get_completions, 405, "invalid_request_error");
  EXPECT_EQ(error["code"], "method_not_allowed");
  EXPECT_EQ(get_completions.headers["Allow"], "POST");
  HttpReply post_health = Post("/health", std::string("{}"));
  ExpectError(post_health, 405, "invalid_request_error");
  EXPECT_EQ(post_health.headers["Allow"], "GET");
  ExpectError(Fetch(port_, "DELETE", "/v1/models"), 405, "invalid_request_error");
}

// The prefix cache's routes: methods checked by the router, ids by the session, and a service
// without a cache answers 501.
TEST_F(HttpServerTest, PrefixCacheRoutes) {
  ExpectError(Get("/v1/cache"), 501, "invalid_request_error");
  ExpectError(Fetch(port_, "DELETE", "/v1/cache/7"), 501, "invalid_request_error");
  ExpectError(Post("/v1/cache/7/pin", std::string()), 501, "invalid_request_error");
  ExpectError(Post("/v1/cache/7/unpin", std::string()), 501, "invalid_request_error");
  HttpReply put = Fetch(port_, "PUT", "/v1/cache");
  ExpectError(put, 405, "invalid_request_error");
  EXPECT_EQ(put.headers["Allow"], "GET");
  EXPECT_EQ(ExpectError(Get("/v1/cache/7/pin"), 405, "invalid_request_error")["code"],
            "method_not_allowed");
  ExpectError(Get("/v1/cache/7"), 405, "invalid_request_error");
  ExpectError(Fetch(port_, "DELETE", "/v1/cache/abc"), 404, "invalid_request_error");
  ExpectError(Fetch(port_, "DELETE", "/v1/cache/-3"), 404, "invalid_request_error");
  ExpectError(Post("/v1/cache/0/pin", std::string()), 404, "invalid_request_error");
}

TEST_F(HttpServerTest, MalformedBodiesNameTheProblem) {
  Json error = ExpectError(Post("/v1/completions", std::string("{\"prompt\": \"x\"")), 400,
                           "invalid_request_error");
  EXPECT_NE(error["message"].get<std::string>().find("invalid JSON"), std::string::npos);
  error = ExpectError(Post("/v1/completions", std::string("[1, 2]")), 400, "invalid_request_error");
  EXPECT_NE(error["message"].get<std::string>().find("JSON object"), std::string::npos);
  error = ExpectError(Post("/v1/completions", Json::object()), 400, "invalid_request_error");
  EXPECT_EQ(error["param"], "prompt");
  error = ExpectError(Post("/v1/chat/completions", Json{{"messages", "hi"}}), 400,
                      "invalid_request_error");
  EXPECT_EQ(error["param"], "messages");
  EXPECT_TRUE(fake_.requests().empty());
}

TEST_F(HttpServerTest, WrongTypesAndRangesNameTheField) {
  struct Case {
    Json body;
    const char* param;
  };
  const Case cases[] = {
      {{{"prompt", kPrompt}, {"max_tokens", "5"}}, "max_tokens"},
      {{{"prompt", kPrompt}, {"max_tokens", 0}}, "max_tokens"},
      {{{"prompt", kPrompt}, {"max_tokens", 2.5}}, "max_tokens"},
      {{{"prompt", kPrompt}, {"max_completion_tokens", -1}}, "max_completion_tokens"},
      {{{"prompt", kPrompt}, {"temperature", 2.5}}, "temperature"},
      {{{"prompt", kPrompt}, {"temperature", "hot"}}, "temperature"},
      {{{"prompt", kPrompt}, {"top_p", 0}}, "top_p"},
      {{{"prompt", kPrompt}, {"top_p", 1.5}}, "top_p"},
      {{{"prompt", kPrompt}, {"top_k", -2}}, "top_k"},
      {{{"prompt", kPrompt}, {"seed", "x"}}, "seed"},
      {{{"prompt", kPrompt}, {"stop", {1, 2}}}, "stop"},
      {{{"prompt", kPrompt}, {"stop", ""}}, "stop"},
      {{{"prompt", kPrompt}, {"stream", "yes"}}, "stream"},
      {{{"prompt", kPrompt}, {"n", 0}}, "n"},
      {{{"prompt", kPrompt}, {"n", 17}}, "n"},
      {{{"prompt", kPrompt}, {"logprobs", 21}}, "logprobs"},
      {{{"prompt", kPrompt}, {"logprobs", true}}, "logprobs"},
      {{{"prompt", kPrompt}, {"presence_penalty", 2.5}}, "presence_penalty"},
      {{{"prompt", kPrompt}, {"frequency_penalty", -3}}, "frequency_penalty"},
      {{{"prompt", kPrompt}, {"repetition_penalty", 0}}, "repetition_penalty"},
      {{{"prompt", kPrompt}, {"repetition_penalty", "high"}}, "repetition_penalty"},
      {{{"prompt", kPrompt}, {"min_p", 1.5}}, "min_p"},
      {{{"prompt", kPrompt}, {"logit_bias", {{"5", 200}}}}, "logit_bias"},
      {{{"prompt", kPrompt}, {"logit_bias", {{"x", 1}}}}, "logit_bias"},
      {{{"prompt", kPrompt}, {"logit_bias", {{"99999", 1}}}}, "logit_bias"},
      {{{"prompt", kPrompt}, {"logit_bias", {1, 2}}}, "logit_bias"},
      {{{"prompt", kPrompt}, {"stop_token_ids", {1, 99999}}}, "stop_token_ids"},
      {{{"prompt", kPrompt}, {"stop_token_ids", 5}}, "stop_token_ids"},
      {{{"prompt", kPrompt}, {"echo", "yes"}}, "echo"},
      {{{"prompt", kPrompt}, {"add_special_tokens", 1}}, "add_special_tokens"},
      {{{"prompt", kPrompt}, {"stream_options", {{"include_usage", true}}}}, "stream_options"},
      {{{"prompt", {kPrompt, "second"}}}, "prompt"},
      {{{"prompt", {1, -4}}}, "prompt"},
      {{{"prompt", ""}}, "prompt"},
      {{{"prompt", kPrompt}, {"model", 7}}, "model"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body.dump());
    Json error = ExpectError(Post("/v1/completions", c.body), 400, "invalid_request_error");
    EXPECT_EQ(error["param"], c.param);
    EXPECT_NE(error["message"].get<std::string>().find(c.param), std::string::npos);
  }
  Json error = ExpectError(
      Post("/v1/chat/completions", Json{{"messages", {{{"role", "user"}, {"content", 5}}}}}), 400,
      "invalid_request_error");
  EXPECT_EQ(error["param"], "messages[0].content");
  EXPECT_TRUE(fake_.requests().empty());
}

TEST_F(HttpServerTest, UnknownModelIs404) {
  Json error = ExpectError(Post("/v1/completions", Json{{"prompt", kPrompt}, {"model", "gpt-4"}}),
                           404, "invalid_request_error");
  EXPECT_EQ(error["code"], "model_not_found");
  EXPECT_EQ(error["param"], "model");
}

TEST_F(HttpServerTest, PromptOverTheContextLimitNamesBothNumbers) {
  fake_.info_.context_limit = 64;  // read per request by the fake's Submit
  Json error = ExpectError(
      Post("/v1/completions", Json{{"prompt", std::vector<int>(100, 5)}, {"max_tokens", 8}}), 400,
      "invalid_request_error");
  EXPECT_EQ(error["code"], "context_length_exceeded");
  EXPECT_EQ(error["param"], "prompt");
  const std::string message = error["message"];
  EXPECT_NE(message.find("100"), std::string::npos) << message;
  EXPECT_NE(message.find("64"), std::string::npos) << message;
}

TEST_F(HttpServerTest, SubmissionRefusalsMapToHttpCodes) {
  fake_.FailNextSubmit(ResourceExhaustedError("queue full (64 jobs waiting)"));
  Json error =
      ExpectError(Post("/v1/completions", Json{{"prompt", kPrompt}}), 429, "rate_limit_error");
  EXPECT_EQ(error["code"], "queue_full");
  EXPECT_NE(error["message"].get<std::string>().find("queue full"), std::string::npos);

  fake_.FailNextSubmit(FailedPreconditionError("draining"));
  ExpectError(Post("/v1/completions", Json{{"prompt", kPrompt}}), 503, "service_unavailable_error");
  fake_.FailNextSubmit(InvalidArgumentError("token id 99999 is outside the vocabulary"));
  ExpectError(Post("/v1/completions", Json{{"prompt", {99999}}}), 400, "invalid_request_error");
  // The server keeps serving.
  EXPECT_EQ(Post("/v1/completions", Json{{"prompt", kPrompt}}).status, 200);
}

TEST_F(HttpServerTest, JobFailureIs500) {
  FakeScript script;
  script.pieces = {"a"};
  script.fail = DeviceError("NCCL error on rank 2");
  fake_.QueueScript(script);
  Json error = ExpectError(Post("/v1/completions", Json{{"prompt", kPrompt}}), 500, "server_error");
  EXPECT_NE(error["message"].get<std::string>().find("rank 2"), std::string::npos);
}

class HttpLimitsTest : public HttpServerTest {
 protected:
  void SetUp() override {
    OpenAiServerOptions options;
    options.max_body_bytes = 1024;
    options.api_key = "sk-test-secret";
    StartServer(options);
  }
  const std::map<std::string, std::string> auth_ = {{"Authorization", "Bearer sk-test-secret"}};
};

TEST_F(HttpLimitsTest, BodyOverTheLimitIs413) {
  std::string big = Json{{"prompt", std::string(4000, 'a')}}.dump();
  Json error = ExpectError(Post("/v1/completions", big, auth_), 413, "invalid_request_error");
  EXPECT_NE(error["message"].get<std::string>().find("1024"), std::string::npos);
  EXPECT_EQ(Post("/v1/completions", Json{{"prompt", kPrompt}}.dump(), auth_).status, 200);
}

TEST_F(HttpLimitsTest, ApiKeyIsRequiredOnV1Routes) {
  const std::string body = Json{{"prompt", kPrompt}}.dump();
  HttpReply missing = Post("/v1/completions", body);
  Json error = ExpectError(missing, 401, "authentication_error");
  EXPECT_EQ(error["code"], "invalid_api_key");
  EXPECT_EQ(missing.headers["WWW-Authenticate"], "Bearer");
  ExpectError(Post("/v1/completions", body, {{"Authorization", "Bearer sk-test-secreT"}}), 401,
              "authentication_error");
  ExpectError(Post("/v1/completions", body, {{"Authorization", "Bearer sk-test-secret2"}}), 401,
              "authentication_error");
  ExpectError(Post("/v1/completions", body, {{"Authorization", "sk-test-secret"}}), 401,
              "authentication_error");
  ExpectError(Fetch(port_, "GET", "/v1/models"), 401, "authentication_error");
  EXPECT_EQ(Post("/v1/completions", body, auth_).status, 200);
  EXPECT_EQ(Fetch(port_, "GET", "/v1/models", "", auth_).status, 200);
  // Probes stay open.
  EXPECT_EQ(Get("/health").status, 200);
  EXPECT_EQ(fake_.requests().size(), 1u);
}

TEST_F(HttpServerTest, ReadyAfterARecentToken) {
  fake_.health_.seconds_since_last_token = 2;
  HttpReply ready = Get("/ready");
  EXPECT_EQ(ready.status, 200) << ready.body;
  EXPECT_TRUE(fake_.requests().empty()) << "no canary needed";
}

TEST_F(HttpServerTest, ReadyRunsACanaryJob) {
  fake_.health_.seconds_since_last_token = -1;
  HttpReply ready = Get("/ready");
  EXPECT_EQ(ready.status, 200) << ready.body;
  ASSERT_EQ(fake_.requests().size(), 1u);
  EXPECT_EQ(fake_.requests()[0].max_new_tokens, 1);
  EXPECT_EQ(fake_.requests()[0].prompt_ids.size(), 1u);
  // A recent canary success answers the next probe without another job.
  EXPECT_EQ(Get("/ready").status, 200);
  EXPECT_EQ(fake_.requests().size(), 1u);
}

TEST_F(HttpServerTest, NotReadyWhenTheCanaryIsRefusedOrNotAccepting) {
  fake_.FailNextSubmit(FailedPreconditionError("a worker failed"));
  Json error = ExpectError(Get("/ready"), 503, "service_unavailable_error");
  EXPECT_NE(error["message"].get<std::string>().find("a worker failed"), std::string::npos);
  fake_.health_.accepting = false;
  fake_.health_.detail = "draining";
  error = ExpectError(Get("/ready"), 503, "service_unavailable_error");
  EXPECT_NE(error["message"].get<std::string>().find("draining"), std::string::npos);
}

class HttpCanaryTimeoutTest : public HttpServerTest {
 protected:
  void SetUp() override {
    OpenAiServerOptions options;
    options.canary_timeout_s = 0.3;
    StartServer(options);
  }
};

TEST_F(HttpCanaryTimeoutTest, SlowCanaryIsNotReadyAndIsCancelled) {
  FakeScript hold;
  hold.pieces = {"x"};
  hold.hold_after = 0;
  fake_.QueueScript(hold);
  Json error = ExpectError(Get("/ready"), 503, "service_unavailable_error");
  EXPECT_NE(error["message"].get<std::string>().find("in time"), std::string::npos);
  ASSERT_EQ(fake_.submitted().size(), 1u);
  EXPECT_TRUE(fake_.WaitForCancel(fake_.submitted()[0]));
}

TEST_F(HttpServerTest, ShutdownCancelsJobsInFlight) {
  FakeScript hold;
  hold.pieces = {"a", "b"};
  hold.hold_after = 1;
  fake_.QueueScript(hold);
  std::thread client([this] {
    try {
      Post("/v1/completions", Json{{"prompt", kPrompt}});
    } catch (...) {
      // The connection is closed under the client.
    }
  });
  ASSERT_TRUE(fake_.WaitForSubmitted(1));
  server_.reset();
  EXPECT_TRUE(fake_.WaitForCancel(fake_.submitted()[0]));
  client.join();
}

}  // namespace
}  // namespace millipede::http_test
