// /tokenize and /detokenize, as vLLM's server has them: text and chat messages to ids (with the
// BOS and the chat template as the completion endpoints apply them), ids back to text, and the
// errors.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "http/chat_template.h"
#include "tests/http/test_fixture.h"

namespace millipede::http_test {
namespace {

TEST_F(HttpServerTest, TokenizeTextAndMessages) {
  HttpReply reply = Post("/tokenize", Json{{"prompt", "Hello there"}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  auto ids = fake_.tokenizer().Encode("Hello there");
  ASSERT_TRUE(ids.ok());
  Json json = reply.json();
  EXPECT_EQ(json["tokens"].get<std::vector<int32_t>>(), *ids);
  EXPECT_EQ(json["count"], ids->size());
  EXPECT_EQ(json["max_model_len"], 3000);  // ModelInfo::max_model_len, as /v1/models
  EXPECT_TRUE(json["token_strs"].is_null());
  // The token strings, on request.
  reply = Post("/tokenize", Json{{"model", "fake-model"},
                                 {"prompt", "Hello"},
                                 {"return_token_strs", true},
                                 {"add_special_tokens", false}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  json = reply.json();
  ASSERT_EQ(json["token_strs"].size(), json["tokens"].size());
  std::string joined;
  for (const Json& s : json["token_strs"]) joined += s.get<std::string>();
  EXPECT_EQ(joined, "Hello");  // byte-level tokens of plain ASCII spell the text
  // Messages go through the chat template, exactly as /v1/chat/completions formats them.
  reply = Post("/tokenize", Json{{"messages", {{{"role", "user"}, {"content", "2+2?"}}}}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  auto formatted = FormatChat(ChatFormat::kLlama3, {{"user", "2+2?"}});
  ASSERT_TRUE(formatted.ok());
  auto chat_ids = fake_.tokenizer().Encode(*formatted);
  ASSERT_TRUE(chat_ids.ok());
  EXPECT_EQ(reply.json()["tokens"].get<std::vector<int32_t>>(), *chat_ids);
  // Nothing was submitted.
  EXPECT_TRUE(fake_.requests().empty());
}

TEST_F(HttpServerTest, DetokenizeRoundTrips) {
  auto ids = fake_.tokenizer().Encode("The quick brown fox.");
  ASSERT_TRUE(ids.ok());
  HttpReply reply = Post("/detokenize", Json{{"tokens", *ids}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.json()["prompt"], "The quick brown fox.");
  reply = Post("/detokenize", Json{{"tokens", Json::array()}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.json()["prompt"], "");
}

TEST_F(HttpServerTest, TokenizeErrorsNameTheField) {
  EXPECT_EQ(ExpectError(Post("/tokenize", Json::object()), 400, "invalid_request_error")["param"],
            "prompt");
  EXPECT_EQ(
      ExpectError(Post("/tokenize", Json{{"prompt", 5}}), 400, "invalid_request_error")["param"],
      "prompt");
  EXPECT_EQ(ExpectError(Post("/tokenize", Json{{"prompt", "x"}, {"return_token_strs", 1}}), 400,
                        "invalid_request_error")["param"],
            "return_token_strs");
  EXPECT_EQ(ExpectError(Post("/tokenize", Json{{"messages", "hi"}}), 400,
                        "invalid_request_error")["param"],
            "messages");
  EXPECT_EQ(ExpectError(Post("/tokenize", Json{{"prompt", "x"}, {"model", "other"}}), 404,
                        "invalid_request_error")["code"],
            "model_not_found");
  EXPECT_EQ(ExpectError(Post("/tokenize", std::string("[1")), 400, "invalid_request_error")["code"],
            "invalid_json");
  const int64_t vocab = fake_.info_.vocab_size;
  Json error =
      ExpectError(Post("/detokenize", Json{{"tokens", {1, vocab}}}), 400, "invalid_request_error");
  EXPECT_EQ(error["param"], "tokens");
  EXPECT_NE(error["message"].get<std::string>().find("tokens[1]"), std::string::npos);
  EXPECT_EQ(ExpectError(Post("/detokenize", Json{{"tokens", "abc"}}), 400,
                        "invalid_request_error")["param"],
            "tokens");
  EXPECT_EQ(ExpectError(Get("/tokenize"), 405, "invalid_request_error")["code"],
            "method_not_allowed");
}

}  // namespace
}  // namespace millipede::http_test
