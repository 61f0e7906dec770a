#include "common/flags.h"

#include <gtest/gtest.h>

#include <vector>

namespace millipede {
namespace {

StatusOr<Flags> Parse(std::vector<const char*> args) {
  args.insert(args.begin(), "tool");
  return Flags::Parse(static_cast<int>(args.size()), const_cast<char**>(args.data()), {"json"});
}

TEST(FlagsTest, ValuesBooleansAndPositionals) {
  auto f = Parse({"--model", "dir", "--top-p=0.5", "--json", "--stop-id", "3", "--stop-id", "4",
                  "extra"});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(*f->Get("model"), "dir");
  EXPECT_EQ(*f->GetDouble("top-p", 1.0), 0.5);
  EXPECT_TRUE(f->GetBool("json"));
  EXPECT_EQ(f->GetAll("stop-id"), (std::vector<std::string>{"3", "4"}));
  EXPECT_EQ(f->positional(), (std::vector<std::string>{"extra"}));
  EXPECT_EQ(*f->GetInt("missing", 7), 7);
  EXPECT_TRUE(f->CheckKnown({"model", "top-p", "json", "stop-id"}).ok());
  EXPECT_NE(f->CheckKnown({"model"}).message().find("--top-p"), std::string::npos);
}

TEST(FlagsTest, BadInputIsNamed) {
  EXPECT_NE(Parse({"--model"}).status().message().find("--model needs a value"),
            std::string::npos);
  // A flag right after a valued flag is a forgotten value.
  EXPECT_NE(Parse({"--model", "--json"}).status().message().find("--model needs a value"),
            std::string::npos);
  EXPECT_FALSE(Parse({"--json=1"}).ok());
  auto f = Parse({"--n", " 5", "--x", "inf", "--y", "1e999", "--z", "3abc"});
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE(f->GetInt("n", 0).ok());
  EXPECT_FALSE(f->GetDouble("x", 0).ok());
  EXPECT_FALSE(f->GetDouble("y", 0).ok());
  EXPECT_NE(f->GetInt("z", 0).status().message().find("--z"), std::string::npos);
}

}  // namespace
}  // namespace millipede
