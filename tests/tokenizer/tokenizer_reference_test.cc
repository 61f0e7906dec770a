// Reference ids computed by Hugging Face `tokenizers` (encode(text, add_special_tokens=False))
// for the GPT-2, Llama 3 and Qwen2 tokenizer files kept beside the project.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "common/json_util.h"
#include "tests/tokenizer/tokenizer_test_util.h"
#include "tokenizer/normalizer_nfc.h"
#include "tokenizer/tokenizer.h"

namespace millipede {
namespace {

using tokenizer_test::IsValidUtf8;
using tokenizer_test::ReferenceDir;

struct ReferenceCase {
  int64_t number;
  std::string text;
  std::vector<int32_t> ids;
};

std::vector<ReferenceCase> LoadCases(const std::string& tokenizer_name) {
  std::vector<ReferenceCase> cases;
  std::ifstream in(ReferenceDir() + "/expected_ids.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto json = ParseJson(line, "expected_ids.jsonl");
    EXPECT_TRUE(json.ok()) << json.status().ToString();
    if (!json.ok() || (*json)["tokenizer"] != tokenizer_name) continue;
    cases.push_back({(*json)["case"].get<int64_t>(), (*json)["text"].get<std::string>(),
                     (*json)["ids"].get<std::vector<int32_t>>()});
  }
  return cases;
}

// Every reference case must encode to exactly HF's ids, decode back to its text (NFC-normalized
// when the tokenizer normalizes) and stream-decode to the same text in whole characters.
void CheckReference(const std::string& name, bool nfc) {
  std::string path = ReferenceDir() + "/" + name + "/tokenizer.json";
  if (!FileExists(ReferenceDir() + "/expected_ids.jsonl") || !FileExists(path)) {
    GTEST_SKIP() << "reference tokenizer data not found under " << ReferenceDir()
                 << " (configure MILLIPEDE_TESTDATA_DIR to the shared testdata folder)";
  }
  auto tokenizer = Tokenizer::FromFile(path);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  std::vector<ReferenceCase> cases = LoadCases(name);
  ASSERT_FALSE(cases.empty()) << "no cases for " << name;
  int matched = 0;
  for (const ReferenceCase& c : cases) {
    SCOPED_TRACE("case " + std::to_string(c.number));
    auto ids = (*tokenizer)->Encode(c.text);
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    EXPECT_EQ(*ids, c.ids);
    matched += *ids == c.ids;
    std::string expected_text = nfc ? tokenizer_internal::NfcNormalize(c.text) : c.text;
    auto decoded = (*tokenizer)->Decode(c.ids);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    EXPECT_EQ(*decoded, expected_text);

    StreamingDecoder stream(**tokenizer);
    std::string streamed;
    for (int32_t id : c.ids) {
      auto chunk = stream.Push(id);
      ASSERT_TRUE(chunk.ok()) << chunk.status().ToString();
      EXPECT_TRUE(IsValidUtf8(*chunk));
      streamed += *chunk;
    }
    streamed += stream.Finish();
    EXPECT_EQ(streamed, expected_text);
  }
  EXPECT_EQ(matched, static_cast<int>(cases.size()));
  std::printf("%s: %d of %zu reference cases match\n", name.c_str(), matched, cases.size());
}

TEST(TokenizerReferenceTest, Gpt2) { CheckReference("gpt2", /*nfc=*/false); }
TEST(TokenizerReferenceTest, Llama3) { CheckReference("llama3", /*nfc=*/false); }
TEST(TokenizerReferenceTest, Qwen2) { CheckReference("qwen2", /*nfc=*/true); }

// Guards against accidentally quadratic paths: 1 MB of mixed text, and single pre-tokens that
// are very long, must encode quickly (the bounds are loose; typical times are far lower).
TEST(TokenizerReferenceTest, LargeInputsEncodeQuickly) {
  std::string path = ReferenceDir() + "/llama3/tokenizer.json";
  if (!FileExists(path)) GTEST_SKIP() << "reference tokenizer not found at " << path;
  auto tokenizer = Tokenizer::FromFile(path);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  std::string mixed;
  const char* const kParts[] = {"The quick brown fox, 12345 jumps! ", "日本語のテキスト。",
                                "def f(x):\n    return x\n", "😀 émoji  \t\n", "Привет мир. "};
  for (size_t i = 0; mixed.size() < (1 << 20); ++i) mixed += kParts[i % 5];
  const std::string inputs[] = {mixed, std::string(1 << 20, 'a'), std::string(1 << 20, ' '),
                                std::string(1 << 19, '!') + std::string(1 << 19, '\n')};
  for (const std::string& input : inputs) {
    auto start = std::chrono::steady_clock::now();
    auto ids = (*tokenizer)->Encode(input);
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    EXPECT_LT(seconds, 10.0);
    auto decoded = (*tokenizer)->Decode(*ids);
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(*decoded, input);
    std::printf("encoded %zu bytes into %zu ids in %.3f s\n", input.size(), ids->size(), seconds);
  }
}

}  // namespace
}  // namespace millipede
