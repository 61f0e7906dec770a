#include "checkpoint/strict_json.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "tests/checkpoint/test_util.h"

namespace millipede {
namespace {

using testing::ExpectErrorContains;

TEST(CheckpointStrictJsonTest, Utf8Validation) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8("\xc3\xa9"));               // é
  EXPECT_TRUE(IsValidUtf8("\xe2\x82\xac"));           // €
  EXPECT_TRUE(IsValidUtf8("\xf0\x9f\x98\x80"));       // U+1F600
  EXPECT_TRUE(IsValidUtf8("\xf4\x8f\xbf\xbf"));       // U+10FFFF
  EXPECT_TRUE(IsValidUtf8(std::string("a\0b", 3)));   // NUL is a valid code point
  EXPECT_FALSE(IsValidUtf8("\x80"));                  // lone continuation byte
  EXPECT_FALSE(IsValidUtf8("\xc3"));                  // truncated
  EXPECT_FALSE(IsValidUtf8("\xe2\x82"));              // truncated
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));              // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xe0\x80\xaf"));          // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));          // surrogate U+D800
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));      // U+110000
  EXPECT_FALSE(IsValidUtf8("\xf8\x88\x80\x80\x80"));  // 5-byte form
  EXPECT_FALSE(IsValidUtf8("\xc3\x28"));              // bad continuation
}

TEST(CheckpointStrictJsonTest, ParsesLikeNlohmann) {
  auto j = ParseJsonRejectingDuplicateKeys(R"({"a": [1, {"b": 2}], "c": {"b": 3}})", "t");
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ((*j)["a"][1]["b"], 2);
  EXPECT_EQ((*j)["c"]["b"], 3);
  ExpectErrorContains(ParseJsonRejectingDuplicateKeys("{\"a\": ", "src.json").status(),
                      {"src.json: invalid JSON"});
  ExpectErrorContains(ParseJsonRejectingDuplicateKeys("{\"\xff\": 1}", "src.json").status(),
                      {"src.json: not valid UTF-8"});
}

TEST(CheckpointStrictJsonTest, RejectsDuplicateKeysAtAnyDepth) {
  ExpectErrorContains(
      ParseJsonRejectingDuplicateKeys(R"({"w": 1, "x": 2, "w": 3})", "h", "tensor name").status(),
      {"h: duplicate tensor name \"w\""});
  ExpectErrorContains(ParseJsonRejectingDuplicateKeys(R"({"o": {"k": 1, "k": 2}})", "h").status(),
                      {"duplicate key \"k\" in \"o\""});
  ExpectErrorContains(
      ParseJsonRejectingDuplicateKeys(R"({"list": [{"k": 1}, {"k": 1, "k": 2}]})", "h").status(),
      {"duplicate key \"k\" in \"list\""});
  // Equal keys in sibling objects are fine.
  EXPECT_TRUE(ParseJsonRejectingDuplicateKeys(R"([{"k": 1}, {"k": 2}])", "h").ok());
}

}  // namespace
}  // namespace millipede
