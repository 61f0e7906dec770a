// logprobs / top_logprobs in responses and stream chunks, n > 1 choices and echo. The fake
// service gives token i of a job the id 100 + i, log-probability -0.5 - i / 10 and alternatives
// 100 + i + j at -0.5 - i / 10 - j.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/http/test_fixture.h"

namespace millipede::http_test {
namespace {

std::string TokenText(const Tokenizer& tokenizer, int32_t id) {
  auto text = tokenizer.Decode({id});
  return text.ok() ? *text : "";
}

FakeScript Pieces(std::vector<std::string> pieces, std::string finish = "length") {
  FakeScript s;
  s.pieces = std::move(pieces);
  s.finish_reason = std::move(finish);
  return s;
}

TEST_F(HttpServerTest, CompletionLogprobs) {
  fake_.QueueScript(Pieces({"Hel", "lo"}));
  HttpReply reply =
      Post("/v1/completions", Json{{"prompt", "Hi"}, {"max_tokens", 2}, {"logprobs", 2}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(fake_.requests()[0].sampling.logprobs, 2);
  const Json lp = reply.json()["choices"][0]["logprobs"];
  const Tokenizer& t = fake_.tokenizer();
  ASSERT_EQ(lp["tokens"].size(), 2u) << lp.dump();
  EXPECT_EQ(lp["tokens"][0], TokenText(t, 100));
  EXPECT_EQ(lp["tokens"][1], TokenText(t, 101));
  EXPECT_FLOAT_EQ(lp["token_logprobs"][0].get<float>(), -0.5f);
  EXPECT_FLOAT_EQ(lp["token_logprobs"][1].get<float>(), -0.6f);
  // Each top_logprobs entry maps the alternatives' text, and the sampled token's, to their
  // log-probabilities.
  const Json top = lp["top_logprobs"][1];
  EXPECT_FLOAT_EQ(top[TokenText(t, 101)].get<float>(), -0.6f);
  EXPECT_FLOAT_EQ(top[TokenText(t, 102)].get<float>(), -1.6f);
  // Offsets count characters of the text before each token.
  EXPECT_EQ(lp["text_offset"][0], 0);
  EXPECT_EQ(lp["text_offset"][1], static_cast<int64_t>(TokenText(t, 100).size()));
  // Without logprobs the field is null.
  fake_.QueueScript(Pieces({"x"}));
  reply = Post("/v1/completions", Json{{"prompt", "Hi"}, {"max_tokens", 1}});
  EXPECT_TRUE(reply.json()["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(fake_.requests()[1].sampling.logprobs, -1);
}

TEST_F(HttpServerTest, ChatLogprobsInResponseAndStream) {
  const Json messages = {{{"role", "user"}, {"content", "Hello"}}};
  fake_.QueueScript(Pieces({"Hi", " there"}));
  HttpReply reply = Post(
      "/v1/chat/completions",
      Json{{"messages", messages}, {"max_tokens", 2}, {"logprobs", true}, {"top_logprobs", 3}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  const Json content = reply.json()["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u) << reply.body;
  const std::string first = TokenText(fake_.tokenizer(), 100);
  EXPECT_EQ(content[0]["token"], first);
  EXPECT_FLOAT_EQ(content[0]["logprob"].get<float>(), -0.5f);
  EXPECT_EQ(content[0]["bytes"].size(), first.size());
  ASSERT_EQ(content[1]["top_logprobs"].size(), 3u);
  EXPECT_FLOAT_EQ(content[1]["top_logprobs"][2]["logprob"].get<float>(), -2.6f);

  // In a stream every token's entry travels with the text it completes; a token whose text is
  // held back (empty piece) goes with the next chunk.
  fake_.QueueScript(Pieces({"A", "", "B"}));
  reply =
      Post("/v1/chat/completions",
           Json{{"messages", messages}, {"max_tokens", 3}, {"logprobs", true}, {"stream", true}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  bool framing_ok = false;
  std::vector<std::string> data = SseData(reply.body, &framing_ok);
  ASSERT_EQ(data.size(), 5u) << reply.body;  // role, "A", "B", finish, [DONE]
  EXPECT_EQ(Json::parse(data[1])["choices"][0]["logprobs"]["content"].size(), 1u);
  const Json second = Json::parse(data[2])["choices"][0];
  EXPECT_EQ(second["delta"]["content"], "B");
  ASSERT_EQ(second["logprobs"]["content"].size(), 2u);
  EXPECT_TRUE(second["logprobs"]["content"][0]["top_logprobs"].empty());  // top_logprobs 0
  EXPECT_TRUE(Json::parse(data[3])["choices"][0]["logprobs"].is_null());
}

TEST_F(HttpServerTest, SeveralChoicesAreJobsWithTheirOwnSeeds) {
  fake_.QueueScript(Pieces({"a", "b"}));
  fake_.QueueScript(Pieces({"c"}, "stop"));
  fake_.QueueScript(Pieces({"d", "e"}));
  HttpReply reply =
      Post("/v1/completions", Json{{"prompt", "Hi"}, {"n", 3}, {"seed", 40}, {"max_tokens", 2}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  const Json json = reply.json();
  ASSERT_EQ(json["choices"].size(), 3u);
  const std::vector<std::string> texts = {"ab", "c", "de"};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(json["choices"][i]["index"], i);
    EXPECT_EQ(json["choices"][i]["text"], texts[i]);
    EXPECT_EQ(fake_.requests()[i].sampling.seed, 40u + i);
  }
  EXPECT_EQ(json["choices"][1]["finish_reason"], "stop");
  // The first choice's text is tokenized by the service; the others reuse its ids.
  auto ids = fake_.tokenizer().Encode("Hi");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(fake_.requests()[0].prompt_text, "Hi");
  EXPECT_TRUE(fake_.requests()[1].prompt_text.empty());
  EXPECT_EQ(fake_.requests()[2].prompt_ids, *ids);
  EXPECT_EQ(json["usage"]["completion_tokens"], 5);  // every choice's tokens, the prompt once
  const int64_t prompt = json["usage"]["prompt_tokens"];
  EXPECT_EQ(json["usage"]["total_tokens"], prompt + 5);

  // Streamed: each chunk names its choice, each choice finishes, one [DONE].
  fake_.QueueScript(Pieces({"x"}));
  fake_.QueueScript(Pieces({"y"}));
  reply = Post("/v1/chat/completions", Json{{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                                            {"n", 2},
                                            {"max_tokens", 1},
                                            {"stream", true}});
  bool framing_ok = false;
  std::vector<std::string> data = SseData(reply.body, &framing_ok);
  ASSERT_EQ(data.size(), 7u) << reply.body;  // 2 roles, 2 texts, 2 finishes, [DONE]
  std::vector<std::string> text(2);
  int finishes = 0;
  for (size_t i = 0; i + 1 < data.size(); ++i) {
    const Json choice = Json::parse(data[i])["choices"][0];
    const size_t index = choice["index"];
    ASSERT_LT(index, 2u);
    text[index] += choice["delta"].value("content", "");
    finishes += !choice["finish_reason"].is_null();
  }
  EXPECT_EQ(text, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(finishes, 2);
  EXPECT_EQ(data.back(), "[DONE]");
}

TEST_F(HttpServerTest, ARefusedChoiceCancelsTheOthers) {
  FakeScript hold = Pieces({"a"});
  hold.hold_after = 0;
  fake_.QueueScript(hold);
  fake_.FailSubmitCall(1, ResourceExhaustedError("queue full"));  // the second choice's job
  Json error = ExpectError(Post("/v1/completions", Json{{"prompt", "Hi"}, {"n", 2}}), 429,
                           "rate_limit_error");
  EXPECT_EQ(error["code"], "queue_full");
  ASSERT_EQ(fake_.submitted().size(), 1u);
  EXPECT_TRUE(fake_.WaitForCancel(fake_.submitted()[0]));
}

TEST_F(HttpServerTest, EchoPutsThePromptFirst) {
  fake_.QueueScript(Pieces({" world"}));
  HttpReply reply =
      Post("/v1/completions", Json{{"prompt", "Hello"}, {"echo", true}, {"max_tokens", 1}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.json()["choices"][0]["text"], "Hello world");
  // Token prompts are echoed decoded.
  auto ids = fake_.tokenizer().Encode("quick brown");
  ASSERT_TRUE(ids.ok());
  fake_.QueueScript(Pieces({"!"}));
  reply = Post("/v1/completions", Json{{"prompt", *ids}, {"echo", true}, {"max_tokens", 1}});
  EXPECT_EQ(reply.json()["choices"][0]["text"], "quick brown!");
  // Streamed: the prompt is the first chunk.
  fake_.QueueScript(Pieces({"?"}));
  reply = Post("/v1/completions",
               Json{{"prompt", "Why"}, {"echo", true}, {"max_tokens", 1}, {"stream", true}});
  bool framing_ok = false;
  std::vector<std::string> data = SseData(reply.body, &framing_ok);
  ASSERT_GE(data.size(), 2u) << reply.body;
  EXPECT_EQ(Json::parse(data[0])["choices"][0]["text"], "Why");
  EXPECT_EQ(Json::parse(data[1])["choices"][0]["text"], "?");
}

}  // namespace
}  // namespace millipede::http_test
