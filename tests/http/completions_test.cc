// /v1/completions and /v1/chat/completions: responses, SSE framing, request mapping, client
// disconnects, keep-alive and concurrency.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "http/chat_template.h"
#include "tests/http/test_fixture.h"

namespace millipede::http_test {
namespace {

TEST_F(HttpServerTest, CompletionResponseAndRequestMapping) {
  FakeScript script;
  script.pieces = {"Hel", "lo", " world"};
  fake_.QueueScript(script);
  Json body = {{"model", "fake-model"}, {"prompt", "Hello there"},
               {"max_tokens", 3},       {"temperature", 0.7},
               {"top_p", 0.9},          {"top_k", 40},
               {"seed", 1234},          {"stop", {"\n\n", "END"}},
               {"ignore_eos", true}};
  HttpReply reply = Post("/v1/completions", body);
  ASSERT_EQ(reply.status, 200) << reply.body;
  Json json = reply.json();
  EXPECT_EQ(json["object"], "text_completion");
  EXPECT_EQ(json["model"], "fake-model");
  EXPECT_EQ(json["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  ASSERT_EQ(json["choices"].size(), 1u);
  EXPECT_EQ(json["choices"][0]["text"], "Hello world");
  EXPECT_EQ(json["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(json["choices"][0]["index"], 0);

  ASSERT_EQ(fake_.requests().size(), 1u);
  const std::vector<JobRequest> requests = fake_.requests();
  const JobRequest& job = requests[0];
  auto expected_ids = fake_.tokenizer().Encode("Hello there");
  ASSERT_TRUE(expected_ids.ok());
  // Tokenized by the service (which counts a text prompt's bytes), with the BOS if the tokenizer
  // has one (this one does not).
  EXPECT_EQ(job.prompt_text, "Hello there");
  EXPECT_TRUE(job.add_bos);
  EXPECT_TRUE(job.prompt_ids.empty());
  EXPECT_EQ(job.max_new_tokens, 3);
  EXPECT_FLOAT_EQ(job.sampling.temperature, 0.7f);
  EXPECT_FLOAT_EQ(job.sampling.top_p, 0.9f);
  EXPECT_EQ(job.sampling.top_k, 40);
  EXPECT_EQ(job.sampling.seed, 1234u);
  EXPECT_EQ(job.stop_strings, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_TRUE(job.ignore_eos);

  const int64_t prompt_tokens = static_cast<int64_t>(expected_ids->size());
  EXPECT_EQ(json["usage"]["prompt_tokens"], prompt_tokens);
  EXPECT_EQ(json["usage"]["completion_tokens"], 3);
  EXPECT_EQ(json["usage"]["total_tokens"], prompt_tokens + 3);
}

TEST_F(HttpServerTest, CompletionDefaultsAndTokenIdPrompts) {
  HttpReply reply = Post("/v1/completions", Json{{"prompt", {5, 6, 7}}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.json()["choices"][0]["text"], "<3>");
  EXPECT_EQ(reply.json()["choices"][0]["finish_reason"], "stop");
  reply = Post("/v1/completions", Json{{"prompt", {{8, 9}}}, {"max_completion_tokens", 2}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.json()["choices"][0]["text"], "<2");

  auto requests = fake_.requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].prompt_ids, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(requests[0].max_new_tokens, 16);  // OpenAI's default
  EXPECT_FLOAT_EQ(requests[0].sampling.temperature, 1.0f);
  EXPECT_FALSE(requests[0].ignore_eos);
  EXPECT_EQ(requests[1].prompt_ids, (std::vector<int32_t>{8, 9}));
  EXPECT_EQ(requests[1].max_new_tokens, 2);
}

TEST_F(HttpServerTest, CompletionStreamIsServerSentEvents) {
  FakeScript script;
  script.pieces = {"Hel", "", "lo"};  // an empty delta sends no event
  script.finish_reason = "stop";
  fake_.QueueScript(script);
  HttpReply reply =
      Post("/v1/completions",
           Json{{"prompt", "Hi"}, {"stream", true}, {"stream_options", {{"include_usage", true}}}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.headers["Content-Type"], "text/event-stream");
  EXPECT_EQ(reply.headers["Transfer-Encoding"], "chunked");
  bool framing_ok = false;
  std::vector<std::string> data = SseData(reply.body, &framing_ok);
  EXPECT_TRUE(framing_ok) << reply.body;
  ASSERT_EQ(data.size(), 5u) << reply.body;
  EXPECT_EQ(data.back(), "[DONE]");
  std::string text;
  for (size_t i = 0; i < 2; ++i) {
    Json chunk = Json::parse(data[i]);
    EXPECT_EQ(chunk["object"], "text_completion");
    EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
    text += chunk["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, "Hello");
  Json last = Json::parse(data[2]);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(last["choices"][0]["text"], "");
  Json usage = Json::parse(data[3]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 3);
  // Every chunk of a stream shares one id.
  EXPECT_EQ(Json::parse(data[0])["id"], usage["id"]);
}

TEST_F(HttpServerTest, StreamErrorAfterTheStartIsAnErrorEvent) {
  FakeScript script;
  script.pieces = {"a"};
  script.fail = InternalError("rank 1 lost");
  fake_.QueueScript(script);
  HttpReply reply = Post("/v1/completions", Json{{"prompt", "Hi"}, {"stream", true}});
  ASSERT_EQ(reply.status, 200);
  bool framing_ok = false;
  std::vector<std::string> data = SseData(reply.body, &framing_ok);
  EXPECT_TRUE(framing_ok);
  ASSERT_EQ(data.size(), 3u) << reply.body;
  Json error = Json::parse(data[1]);
  EXPECT_EQ(error["error"]["type"], "server_error");
  EXPECT_NE(error["error"]["message"].get<std::string>().find("rank 1 lost"), std::string::npos);
  EXPECT_EQ(data[2], "[DONE]");
}

TEST_F(HttpServerTest, ChatCompletionUsesTheLlama3Template) {
  FakeScript script;
  script.pieces = {"4"};
  script.finish_reason = "stop";
  fake_.QueueScript(script);
  Json body = {{"messages",
                {{{"role", "system"}, {"content", "Be brief."}},
                 {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "2+2?"}}}}}}}};
  HttpReply reply = Post("/v1/chat/completions", body);
  ASSERT_EQ(reply.status, 200) << reply.body;
  Json json = reply.json();
  EXPECT_EQ(json["object"], "chat.completion");
  EXPECT_EQ(json["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(json["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(json["choices"][0]["message"]["content"], "4");
  EXPECT_EQ(json["choices"][0]["finish_reason"], "stop");

  ASSERT_EQ(fake_.requests().size(), 1u);
  const std::vector<JobRequest> requests = fake_.requests();
  const JobRequest& job = requests[0];
  auto formatted = FormatChat(ChatFormat::kLlama3, {{"system", "Be brief."}, {"user", "2+2?"}});
  ASSERT_TRUE(formatted.ok());
  auto ids = fake_.tokenizer().Encode(*formatted);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(job.prompt_text, *formatted);
  EXPECT_FALSE(job.add_bos);  // the template writes its own
  auto eot = fake_.tokenizer().TokenToId("<|eot_id|>");
  ASSERT_TRUE(eot.has_value());
  EXPECT_EQ(job.stop_ids, std::vector<int32_t>{*eot});
  EXPECT_EQ(job.stop_strings, std::vector<std::string>{"<|eot_id|>"});
  // Without max_tokens a chat answer gets the default cap, bounded by the rest of the context.
  EXPECT_TRUE(job.max_new_tokens_to_limit);
  EXPECT_EQ(job.max_new_tokens, std::min<int64_t>(kDefaultChatMaxTokens,
                                                  fake_.GetModelInfo().context_limit -
                                                      static_cast<int64_t>(ids->size())));
  EXPECT_EQ(json["usage"]["prompt_tokens"], static_cast<int64_t>(ids->size()));
}

TEST_F(HttpServerTest, ChatStreamStartsWithTheRole) {
  FakeScript script;
  script.pieces = {"Hi", " there"};
  fake_.QueueScript(script);
  HttpReply reply =
      Post("/v1/chat/completions", Json{{"messages", {{{"role", "user"}, {"content", "Hello"}}}},
                                        {"stream", true},
                                        {"max_tokens", 2}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  bool framing_ok = false;
  std::vector<std::string> data = SseData(reply.body, &framing_ok);
  EXPECT_TRUE(framing_ok);
  ASSERT_EQ(data.size(), 5u) << reply.body;
  Json first = Json::parse(data[0]);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(Json::parse(data[1])["choices"][0]["delta"]["content"], "Hi");
  EXPECT_EQ(Json::parse(data[2])["choices"][0]["delta"]["content"], " there");
  Json last = Json::parse(data[3]);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(last["choices"][0]["delta"].empty());
  EXPECT_EQ(data[4], "[DONE]");
}

// --default-max-tokens: the cap of a chat without max_tokens, never past the context; 0 lifts it.
TEST(HttpChatFormatTest, ChatsWithoutMaxTokensGetTheDefaultCap) {
  for (int64_t cap : {int64_t{5}, int64_t{100000}, int64_t{0}}) {
    SCOPED_TRACE(cap);
    FakeJobService fake;
    OpenAiServerOptions options;
    options.bind_address = "127.0.0.1:0";
    options.chat_default_max_tokens = cap;
    auto server = OpenAiServer::Start(fake, options);
    ASSERT_TRUE(server.ok());
    const Json messages = {{{"role", "user"}, {"content", "Hi"}}};
    HttpReply reply = Fetch((*server)->port(), "POST", "/v1/chat/completions",
                            Json{{"messages", messages}}.dump());
    ASSERT_EQ(reply.status, 200) << reply.body;
    // max_tokens wins over the cap; completions keep OpenAI's 16.
    reply = Fetch((*server)->port(), "POST", "/v1/chat/completions",
                  Json{{"messages", messages}, {"max_tokens", 7}}.dump());
    ASSERT_EQ(reply.status, 200) << reply.body;
    reply = Fetch((*server)->port(), "POST", "/v1/completions", Json{{"prompt", "Hi"}}.dump());
    ASSERT_EQ(reply.status, 200) << reply.body;
    const std::vector<JobRequest> requests = fake.requests();
    ASSERT_EQ(requests.size(), 3u);
    auto ids = fake.tokenizer().Encode(requests[0].prompt_text);
    ASSERT_TRUE(ids.ok());
    const int64_t left = fake.GetModelInfo().context_limit - static_cast<int64_t>(ids->size());
    EXPECT_EQ(requests[0].max_new_tokens, cap == 5 ? 5 : left);
    EXPECT_EQ(requests[1].max_new_tokens, 7);
    EXPECT_EQ(requests[2].max_new_tokens, 16);
  }
}

TEST(HttpChatFormatTest, ModelWithoutTemplateIsAClear400) {
  FakeJobService fake({"<|bos|>", "<|eos|>"});
  OpenAiServerOptions options;
  options.bind_address = "127.0.0.1:0";
  auto server = OpenAiServer::Start(fake, options);
  ASSERT_TRUE(server.ok());
  HttpReply reply = Fetch((*server)->port(), "POST", "/v1/chat/completions",
                          Json{{"messages", {{{"role", "user"}, {"content", "Hi"}}}}}.dump());
  EXPECT_EQ(reply.status, 400);
  Json error = reply.json()["error"];
  EXPECT_EQ(error["code"], "chat_template_unavailable");
  const std::string message = error["message"].get<std::string>();
  for (const char* hint : {"no chat template", "--chat-template FILE", "--chat-format",
                           "/v1/completions"}) {
    EXPECT_NE(message.find(hint), std::string::npos) << hint << " in " << message;
  }
  EXPECT_TRUE(fake.requests().empty());
}

TEST(HttpChatFormatTest, ConfiguredChatMlFormat) {
  FakeJobService fake({"<|im_start|>", "<|im_end|>"});
  fake.info_.chat_format = "chatml";
  OpenAiServerOptions options;
  options.bind_address = "127.0.0.1:0";
  options.served_model_name = "my-qwen";
  auto server = OpenAiServer::Start(fake, options);
  ASSERT_TRUE(server.ok());
  HttpReply reply = Fetch((*server)->port(), "POST", "/v1/chat/completions",
                          Json{{"model", "my-qwen"},
                               {"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                               {"max_tokens", 4}}
                              .dump());
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.json()["model"], "my-qwen");
  ASSERT_EQ(fake.requests().size(), 1u);
  EXPECT_EQ(fake.requests()[0].prompt_text,
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(fake.requests()[0].stop_strings, std::vector<std::string>{"<|im_end|>"});
}

// Connects a raw socket, sends `request`, reads until `marker` arrived, then closes.
bool SendAndHangUp(int port, const std::string& request, const std::string& marker) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return false;
  ::send(fd, request.data(), request.size(), 0);
  std::string received;
  char buffer[4096];
  bool seen = marker.empty();
  while (!seen) {
    ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    received.append(buffer, static_cast<size_t>(n));
    seen = received.find(marker) != std::string::npos;
  }
  ::close(fd);
  return seen;
}

std::string RawPost(const std::string& target, const std::string& body) {
  return "POST " + target + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

TEST_F(HttpServerTest, ClientLeavingAStreamCancelsItsJob) {
  FakeScript script;
  script.pieces = {"first", "second"};
  script.hold_after = 1;
  fake_.QueueScript(script);
  ASSERT_TRUE(SendAndHangUp(
      port_, RawPost("/v1/completions", Json{{"prompt", "Hi"}, {"stream", true}}.dump()), "first"));
  ASSERT_EQ(fake_.submitted().size(), 1u);
  EXPECT_TRUE(fake_.WaitForCancel(fake_.submitted()[0]));
  EXPECT_TRUE(fake_.WaitForEnd(fake_.submitted()[0]));
  // The server carries on.
  EXPECT_EQ(Post("/v1/completions", Json{{"prompt", "Hi"}}).status, 200);
}

TEST_F(HttpServerTest, ClientLeavingBeforeTheAnswerCancelsItsJob) {
  FakeScript script;
  script.pieces = {"a"};
  script.hold_after = 0;
  fake_.QueueScript(script);
  ASSERT_TRUE(
      SendAndHangUp(port_,
                    RawPost("/v1/chat/completions",
                            Json{{"messages", {{{"role", "user"}, {"content", "Hi"}}}}}.dump()),
                    ""));
  ASSERT_TRUE(fake_.WaitForSubmitted(1));
  EXPECT_TRUE(fake_.WaitForCancel(fake_.submitted()[0]));
}

TEST_F(HttpServerTest, KeepAliveServesRequestsInTurn) {
  HttpClient client(port_);
  for (int i = 1; i <= 3; ++i) {
    HttpReply reply = client.Send(
        "POST", "/v1/completions",
        Json{{"prompt", std::vector<int>(static_cast<size_t>(i), 1)}, {"stream", i == 2}}.dump());
    ASSERT_EQ(reply.status, 200) << reply.body;
    const std::string expected = i == 2 ? "data: [DONE]" : "<" + std::to_string(i) + ">";
    EXPECT_NE(reply.body.find(expected), std::string::npos) << reply.body;
  }
  EXPECT_EQ(client.Send("GET", "/health").status, 200);
}

TEST_F(HttpServerTest, ConcurrentRequestsGetTheirOwnAnswers) {
  constexpr int kClients = 8;
  std::vector<std::thread> threads;
  std::vector<std::string> answers(kClients);
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      Json body = {{"prompt", std::vector<int>(static_cast<size_t>(i + 1), 3)},
                   {"stream", i % 2 == 0}};
      HttpReply reply = Post("/v1/completions", body);
      if (reply.status != 200) return;
      if (i % 2 == 1) {
        answers[i] = reply.json()["choices"][0]["text"];
        return;
      }
      bool framing_ok = false;
      for (const std::string& data : SseData(reply.body, &framing_ok)) {
        if (data == "[DONE]") break;
        answers[i] += Json::parse(data)["choices"][0]["text"].get<std::string>();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kClients; ++i) {
    EXPECT_EQ(answers[i], "<" + std::to_string(i + 1) + ">") << "client " << i;
  }
  EXPECT_EQ(fake_.requests().size(), static_cast<size_t>(kClients));
}

}  // namespace
}  // namespace millipede::http_test

namespace millipede::http_test {
namespace {

std::string Request(const std::string& version, const std::string& body,
                    const std::string& extra_headers = "") {
  return "POST /v1/completions HTTP/" + version + "\r\nHost: x\r\n" + extra_headers +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

size_t Count(const std::string& text, const std::string& what) {
  size_t count = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) {
    ++count;
  }
  return count;
}

TEST_F(HttpServerTest, Http10StreamEndsWithTheConnection) {
  std::string reply =
      RawExchange(port_, Request("1.0", Json{{"prompt", {1, 2}}, {"stream", true}}.dump()));
  EXPECT_EQ(reply.rfind("HTTP/1.0 200 OK\r\n", 0), 0u) << reply;
  EXPECT_EQ(reply.find("chunked"), std::string::npos);
  ASSERT_GE(reply.size(), 14u);
  EXPECT_EQ(reply.substr(reply.size() - 14), "data: [DONE]\n\n");
}

TEST_F(HttpServerTest, PipelinedRequestsAreAnsweredInOrder) {
  const std::string first = Request("1.1", Json{{"prompt", {1}}}.dump());
  const std::string second =
      Request("1.1", Json{{"prompt", {1, 2, 3, 4}}}.dump(), "Connection: close\r\n");
  std::string replies = RawExchange(port_, first + second);
  EXPECT_EQ(Count(replies, "HTTP/1.1 200 OK"), 2u) << replies;
  size_t a = replies.find("<1>");
  size_t b = replies.find("<4>");
  ASSERT_NE(a, std::string::npos) << replies;
  ASSERT_NE(b, std::string::npos) << replies;
  EXPECT_LT(a, b);
}

TEST_F(HttpServerTest, ExpectContinueGetsAnInterimReply) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port_));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const std::string body = Json{{"prompt", {7, 7}}}.dump();
  const std::string head =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
      "Expect: 100-continue\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n";
  ::send(fd, head.data(), head.size(), 0);
  char buffer[4096];
  ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
  ASSERT_GT(n, 0);
  EXPECT_EQ(std::string(buffer, static_cast<size_t>(n)), "HTTP/1.1 100 Continue\r\n\r\n");
  ::send(fd, body.data(), body.size(), 0);
  std::string reply;
  while ((n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0)
    reply.append(buffer, static_cast<size_t>(n));
  ::close(fd);
  EXPECT_EQ(reply.rfind("HTTP/1.1 200 OK", 0), 0u) << reply;
  EXPECT_NE(reply.find("<2>"), std::string::npos) << reply;
}

}  // namespace
}  // namespace millipede::http_test
