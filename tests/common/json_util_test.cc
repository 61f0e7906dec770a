#include "common/json_util.h"

#include <gtest/gtest.h>

namespace millipede {
namespace {

TEST(JsonUtilTest, ParsesAndReportsErrors) {
  auto ok = ParseJson(R"({"a": 3, "b": "x", "c": 1.5, "d": true, "e": null, "f": 4.0})", "t");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*JsonGetInt(*ok, "a", "t"), 3);
  EXPECT_EQ(*JsonGetInt(*ok, "f", "t"), 4);
  EXPECT_FALSE(JsonGetInt(*ok, "c", "t").ok());
  EXPECT_EQ(*JsonGetString(*ok, "b", "t"), "x");
  EXPECT_EQ(*JsonGetNumber(*ok, "c", "t"), 1.5);
  EXPECT_TRUE(*JsonGetBool(*ok, "d", "t"));
  EXPECT_EQ(*JsonGetIntOr(*ok, "e", 9, "t"), 9);
  EXPECT_EQ(*JsonGetIntOr(*ok, "zz", 9, "t"), 9);
  Status missing = JsonGetInt(*ok, "zz", "config.json").status();
  EXPECT_NE(missing.message().find("config.json"), std::string::npos);
  EXPECT_NE(missing.message().find("zz"), std::string::npos);
  EXPECT_FALSE(JsonGetString(*ok, "a", "t").ok());

  auto bad = ParseJson("{\"a\": ", "broken.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("broken.json"), std::string::npos);
  EXPECT_NE(bad.status().message().find("invalid JSON"), std::string::npos);
}

TEST(JsonUtilTest, NumbersBeyondADoubleAreAnErrorNotAnException) {
  for (const char* text : {R"({"model": "M", "max_tokens": 4, "x": -1e400})",
                           R"({"max_tokens": 1e400})", R"({"temperature": 1e999})", "[1e309]"}) {
    auto r = ParseJson(text, "the request");
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_NE(r.status().message().find("the request: invalid JSON"), std::string::npos)
        << r.status().ToString();
    EXPECT_NE(r.status().message().find("overflow"), std::string::npos) << r.status().ToString();
  }
  // The largest finite doubles still parse.
  EXPECT_TRUE(ParseJson(R"({"x": 1.7976931348623157e308, "y": -4.9e-324})", "t").ok());
}

}  // namespace
}  // namespace millipede
