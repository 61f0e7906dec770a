// Malformed tokenizer files, invalid input and unknown ids give clear errors, never crashes.
#include <gtest/gtest.h>

#include <string>

#include "tests/tokenizer/tokenizer_test_util.h"
#include "tokenizer/tokenizer.h"

namespace millipede {
namespace {

using tokenizer_test::ByteLevel;
using tokenizer_test::ByteLevelTokenizerJson;

Json BaseJson() { return ByteLevelTokenizerJson({{"h", "e"}, {"l", "l"}, {" ", "w"}}); }

// Loads `json` and expects an error of `code` whose message contains `needle`.
void ExpectLoadError(const std::string& text, StatusCode code, const std::string& needle) {
  auto tokenizer = Tokenizer::FromJson(text, "test.json");
  ASSERT_FALSE(tokenizer.ok()) << "loaded although it should not: " << text.substr(0, 200);
  EXPECT_EQ(tokenizer.status().code(), code) << tokenizer.status().ToString();
  EXPECT_NE(tokenizer.status().message().find(needle), std::string::npos)
      << "message \"" << tokenizer.status().message() << "\" lacks \"" << needle << "\"";
  EXPECT_NE(tokenizer.status().message().find("test.json"), std::string::npos);
}

TEST(TokenizerErrorsTest, BaseFileLoads) {
  auto tokenizer = Tokenizer::FromJson(BaseJson().dump(), "test.json");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
}

TEST(TokenizerErrorsTest, BadJson) {
  ExpectLoadError("{\"model\": ", StatusCode::kInvalidArgument, "invalid JSON");
  ExpectLoadError("", StatusCode::kInvalidArgument, "invalid JSON");
  ExpectLoadError("[1, 2]", StatusCode::kInvalidArgument, "JSON object");
  ExpectLoadError("{}", StatusCode::kInvalidArgument, "model");
}

TEST(TokenizerErrorsTest, ModelProblems) {
  Json j = BaseJson();
  j["model"]["type"] = "WordPiece";
  ExpectLoadError(j.dump(), StatusCode::kUnimplemented, "WordPiece");
  j["model"]["type"] = "Banana";
  ExpectLoadError(j.dump(), StatusCode::kInvalidArgument, "Banana");

  j = BaseJson();
  j["model"]["merges"].push_back(ByteLevel(" ") + " zzzunknown");
  ExpectLoadError(j.dump(), StatusCode::kInvalidArgument, "zzzunknown");
  j = BaseJson();
  j["model"]["merges"].push_back("a b c");
  ExpectLoadError(j.dump(), StatusCode::kInvalidArgument, "one space");
  j = BaseJson();
  j["model"]["merges"].push_back("x y");  // both known, but "xy" is not in the vocab
  ExpectLoadError(j.dump(), StatusCode::kInvalidArgument, "merged token \"xy\"");
  j = BaseJson();
  j["model"]["merges"].push_back(42);
  ExpectLoadError(j.dump(), StatusCode::kInvalidArgument, "merges[3]");
  j = BaseJson();
  j["model"]["vocab"]["oops"] = "seven";
  ExpectLoadError(j.dump(), StatusCode::kInvalidArgument, "oops");
  j = BaseJson();
  j["model"]["vocab"]["neg"] = -4;
  ExpectLoadError(j.dump(), StatusCode::kInvalidArgument, "out of range");
  j = BaseJson();
  j["model"].erase("vocab");
  ExpectLoadError(j.dump(), StatusCode::kInvalidArgument, "vocab");
  j = BaseJson();
  j["model"]["dropout"] = 0.1;
  ExpectLoadError(j.dump(), StatusCode::kUnimplemented, "dropout");
  j = BaseJson();
  j["model"]["unk_token"] = "<nope>";
  ExpectLoadError(j.dump(), StatusCode::kInvalidArgument, "<nope>");
}

TEST(TokenizerErrorsTest, PipelineProblems) {
  Json j = BaseJson();
  j["normalizer"] = {{"type", "Lowercase"}};
  ExpectLoadError(j.dump(), StatusCode::kUnimplemented, "Lowercase");
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers", {{{"type", "NFC"}}, {{"type", "NFKC"}}}}};
  ExpectLoadError(j.dump(), StatusCode::kUnimplemented, "NFKC");
  j["normalizer"] = {{"kind", "NFC"}};
  ExpectLoadError(j.dump(), StatusCode::kInvalidArgument, "type");

  j = BaseJson();
  j["pre_tokenizer"] = {{"type", "Split"},
                        {"pattern", {{"Regex", "(unclosed"}}},
                        {"behavior", "Isolated"},
                        {"invert", false}};
  ExpectLoadError(j.dump(), StatusCode::kInvalidArgument, "bad regex");
  j["pre_tokenizer"]["pattern"] = {{"Regex", "\\p{Bogus}"}};
  ExpectLoadError(j.dump(), StatusCode::kInvalidArgument, "bad regex");
  j["pre_tokenizer"]["pattern"] = {{"Regex", "\\s+"}};
  j["pre_tokenizer"]["behavior"] = "Sideways";
  ExpectLoadError(j.dump(), StatusCode::kInvalidArgument, "Sideways");
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  ExpectLoadError(j.dump(), StatusCode::kUnimplemented, "Whitespace");

  j = BaseJson();
  j["decoder"] = {{"type", "WordPiece"}};
  ExpectLoadError(j.dump(), StatusCode::kUnimplemented, "WordPiece");
  j = BaseJson();
  j["added_tokens"] = {{{"content", "<x>"}}};
  ExpectLoadError(j.dump(), StatusCode::kInvalidArgument, "\"id\"");
  j["added_tokens"] = "nope";
  ExpectLoadError(j.dump(), StatusCode::kInvalidArgument, "array");
}

TEST(TokenizerErrorsTest, MissingFile) {
  auto tokenizer = Tokenizer::FromFile("/nonexistent/dir/tokenizer.json");
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_NE(tokenizer.status().message().find("/nonexistent/dir/tokenizer.json"),
            std::string::npos);
}

TEST(TokenizerErrorsTest, InvalidUtf8InputIsRejectedWithItsOffset) {
  auto tokenizer = Tokenizer::FromJson(BaseJson().dump(), "test.json");
  ASSERT_TRUE(tokenizer.ok());
  const std::pair<std::string, size_t> bad[] = {
      {"abc\xff", 3},            // never valid
      {"ok \xe2\x82", 3},        // truncated at the end
      {"\xc0\xaf", 0},           // overlong '/'
      {"x\xed\xa0\x80y", 1},     // UTF-16 surrogate
      {"\xf4\x90\x80\x80", 0},   // above U+10FFFF
      {"h\xc3\xa9llo \x80", 7},  // stray continuation byte
  };
  for (const auto& [text, offset] : bad) {
    auto ids = (*tokenizer)->Encode(text);
    ASSERT_FALSE(ids.ok());
    EXPECT_EQ(ids.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(ids.status().message().find("offset " + std::to_string(offset)), std::string::npos)
        << ids.status().ToString();
  }
}

TEST(TokenizerErrorsTest, UnknownIds) {
  auto tokenizer = Tokenizer::FromJson(BaseJson().dump(), "test.json");
  ASSERT_TRUE(tokenizer.ok());
  auto reference = (*tokenizer)->Decode({104});
  ASSERT_TRUE(reference.ok());
  // Ids beyond the tokenizer (a padded model vocabulary) decode to nothing, as in HF.
  for (int32_t id : {259, 1 << 30}) {
    auto text = (*tokenizer)->Decode({104, id});
    ASSERT_TRUE(text.ok()) << text.status().ToString();
    EXPECT_EQ(*text, *reference);
    EXPECT_EQ((*tokenizer)->IdToToken(id).status().code(), StatusCode::kNotFound);
  }
  auto negative = (*tokenizer)->Decode({104, -1});
  ASSERT_FALSE(negative.ok());
  EXPECT_EQ(negative.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(negative.status().message().find("-1"), std::string::npos);
  StreamingDecoder stream(**tokenizer);
  ASSERT_TRUE(stream.Push(0xE6).ok());  // first byte of a three-byte character
  EXPECT_FALSE(stream.Push(-5).ok());
  auto unknown = stream.Push(5000);
  ASSERT_TRUE(unknown.ok());
  EXPECT_EQ(*unknown, "");
  ASSERT_TRUE(stream.Push(0x97).ok());
  auto last = stream.Push(0xA5);
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(*last, "\u65e5");  // neither push disturbed the pending bytes
}

}  // namespace
}  // namespace millipede
