// millipede-tokenize end to end: modes, exit codes and error messages.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "common/file_util.h"
#include "tests/tokenizer/tokenizer_test_util.h"

namespace millipede {
namespace {

struct RunResult {
  int exit_code;
  std::string output;  // stdout and stderr together
};

class TokenizerCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    binary_ = std::string(MILLIPEDE_BINARY_DIR) + "/bin/millipede-tokenize";
    if (!FileExists(binary_)) GTEST_SKIP() << binary_ << " is not built";
    // CTest runs each test case as its own process, in parallel: one folder per test.
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = JoinPath(::testing::TempDir(), std::string("millipede_cli_") + info->name() + "_" +
                                              std::to_string(::getpid()));
    ASSERT_EQ(::mkdir(dir_.c_str(), 0700), 0);
    json_ = JoinPath(dir_, "cli_tokenizer.json");
    ASSERT_TRUE(WriteStringToFile(json_, tokenizer_test::TrainedTokenizerJson()).ok());
  }

  // Runs the binary with `args`, feeding `input` on stdin.
  RunResult Run(const std::string& args, const std::string& input) {
    std::string in_path = JoinPath(dir_, "cli_stdin.txt");
    EXPECT_TRUE(WriteStringToFile(in_path, input).ok());
    std::string command = binary_ + " " + args + " < " + in_path + " 2>&1";
    RunResult result{-1, ""};
    FILE* pipe = popen(command.c_str(), "r");
    if (pipe == nullptr) return result;
    char buffer[4096];
    size_t n;
    while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, n);
    int status = pclose(pipe);
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return result;
  }

  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  std::string binary_;
  std::string dir_;
  std::string json_;
};

TEST_F(TokenizerCliTest, EncodeThenDecode) {
  RunResult encoded = Run(json_, "the cat, 日本 😀\n");
  ASSERT_EQ(encoded.exit_code, 0) << encoded.output;
  ASSERT_FALSE(encoded.output.empty());
  EXPECT_EQ(encoded.output.back(), '\n');
  RunResult decoded = Run(json_ + " --decode", encoded.output);
  ASSERT_EQ(decoded.exit_code, 0) << decoded.output;
  EXPECT_EQ(decoded.output, "the cat, 日本 😀\n");
}

TEST_F(TokenizerCliTest, JsonLines) {
  RunResult encoded = Run(json_ + " --jsonl", "\"a\\nb\"\n\n\"<|bos|>hi\"\n");
  ASSERT_EQ(encoded.exit_code, 0) << encoded.output;
  EXPECT_EQ(encoded.output.find("[97,10,98]\n["), 0u) << encoded.output;
  RunResult decoded = Run(json_ + " --decode --jsonl", "[97,10,98]\n[104, 105]\n");
  ASSERT_EQ(decoded.exit_code, 0) << decoded.output;
  EXPECT_EQ(decoded.output, "\"a\\nb\"\n\"hi\"\n");
}

// A model directory stands for its tokenizer.json (a GGUF file's vocabulary is tested with the
// real model by cluster/real-attention.py's smoke test).
TEST_F(TokenizerCliTest, ModelDirectory) {
  const std::string model = JoinPath(dir_, "model");
  ASSERT_EQ(::mkdir(model.c_str(), 0700), 0);
  ASSERT_TRUE(
      WriteStringToFile(JoinPath(model, "tokenizer.json"), tokenizer_test::TrainedTokenizerJson())
          .ok());
  RunResult by_json = Run(json_, "the cat sat");
  RunResult by_dir = Run(model, "the cat sat");
  ASSERT_EQ(by_dir.exit_code, 0) << by_dir.output;
  EXPECT_EQ(by_dir.output, by_json.output);
  RunResult empty = Run(dir_, "x");  // a directory without tokenizer.json
  EXPECT_EQ(empty.exit_code, 1) << empty.output;
  EXPECT_NE(empty.output.find("has no tokenizer.json"), std::string::npos) << empty.output;
}

TEST_F(TokenizerCliTest, BadInputFailsWithAMessage) {
  struct Case {
    std::string args;
    std::string input;
    int exit_code;
    std::string needle;
  };
  const Case cases[] = {
      {json_ + " --decode", "1 2 banana", 1, "banana"},
      {json_ + " --decode", "-7", 1, "-7"},
      {json_ + " --decode", "12345678901234567890", 1, "not a token id"},
      {json_, "bad \xff byte", 1, "offset 4"},
      {json_ + " --jsonl", "\"ok\"\n[1,2]\n", 1, "line 2"},
      {json_ + " --jsonl", "not json\n", 1, "line 1"},
      {json_ + " --decode --jsonl", "[1, \"x\"]\n", 1, "integers"},
      {json_ + " --decode --jsonl", "{\"a\": 1}\n", 1, "array"},
      {json_ + " --frobnicate", "", 2, "unknown flag"},
      {"", "", 2, "usage"},
      {"/nonexistent/tokenizer.json", "x", 1, "/nonexistent/tokenizer.json"},
  };
  for (const Case& c : cases) {
    RunResult r = Run(c.args, c.input);
    EXPECT_EQ(r.exit_code, c.exit_code) << c.args << ": " << r.output;
    EXPECT_NE(r.output.find(c.needle), std::string::npos) << c.args << ": " << r.output;
  }
}

}  // namespace
}  // namespace millipede
