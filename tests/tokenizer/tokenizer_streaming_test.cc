// StreamingDecoder: ids fed one at a time yield the full text, never a partial character.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/file_util.h"
#include "tests/tokenizer/tokenizer_test_util.h"
#include "tokenizer/tokenizer.h"

namespace millipede {
namespace {

using tokenizer_test::IsValidUtf8;

const char* const kTexts[] = {
    "Emoji: 😀🎉👍🏽 family 👨‍👩‍👧‍👦 flag 🇯🇵 done.",
    "日本語のテキストと中文文本，还有한국어.",
    "Mixed: naïve café — «quotes» … 𝓯𝓪𝓷𝓬𝔂 𐍈 text",
    "plain ascii only",
};

// Streams the ids of every text through `tokenizer` and checks the chunks.
void CheckStreaming(const Tokenizer& tokenizer) {
  for (const char* text : kTexts) {
    SCOPED_TRACE(text);
    auto ids = tokenizer.Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    StreamingDecoder stream(tokenizer);
    std::string joined;
    int chunks_with_text = 0;
    for (int32_t id : *ids) {
      auto chunk = stream.Push(id);
      ASSERT_TRUE(chunk.ok()) << chunk.status().ToString();
      EXPECT_TRUE(IsValidUtf8(*chunk)) << "partial character in a chunk";
      EXPECT_EQ(chunk->find("\xEF\xBF\xBD"), std::string::npos) << "replacement character";
      chunks_with_text += !chunk->empty();
      joined += *chunk;
    }
    EXPECT_EQ(stream.Finish(), "");
    EXPECT_EQ(joined, text);
    EXPECT_GT(chunks_with_text, 1);
  }
}

TEST(TokenizerStreamingTest, TrainedTokenizer) {
  auto tokenizer = Tokenizer::FromJson(tokenizer_test::TrainedTokenizerJson(), "trained");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  CheckStreaming(**tokenizer);
}

TEST(TokenizerStreamingTest, Llama3Tokenizer) {
  std::string path = tokenizer_test::ReferenceDir() + "/llama3/tokenizer.json";
  if (!FileExists(path)) GTEST_SKIP() << "reference tokenizer not found at " << path;
  auto tokenizer = Tokenizer::FromFile(path);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  CheckStreaming(**tokenizer);
}

TEST(TokenizerStreamingTest, InvalidSequencesBecomeReplacementCharacters) {
  auto tokenizer = Tokenizer::FromJson(tokenizer_test::TrainedTokenizerJson(), "trained");
  ASSERT_TRUE(tokenizer.ok());
  // Trained vocabularies start with the 256 byte symbols in byte order: id == byte.
  const std::vector<int32_t> ids = {'a', 0xE6, 0x97, 'b', 0xFF, 0xF0, 0x9F, 0x98, 0x80, 0xE6};
  StreamingDecoder stream(**tokenizer);
  std::vector<std::string> chunks;
  for (int32_t id : ids) {
    auto chunk = stream.Push(id);
    ASSERT_TRUE(chunk.ok());
    chunks.push_back(*chunk);
  }
  chunks.push_back(stream.Finish());
  const std::vector<std::string> expected = {"a", "", "",           "\uFFFDb", "\uFFFD", "",
                                             "",  "", "\U0001F600", "",        "\uFFFD"};
  EXPECT_EQ(chunks, expected);
  std::string joined;
  for (const std::string& c : chunks) joined += c;
  auto decoded = (*tokenizer)->Decode(ids);
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(joined, *decoded);
}

TEST(TokenizerStreamingTest, SkipsSpecialTokensWhenAsked) {
  auto tokenizer = Tokenizer::FromJson(tokenizer_test::TrainedTokenizerJson(), "trained");
  ASSERT_TRUE(tokenizer.ok());
  std::optional<int32_t> bos = (*tokenizer)->TokenToId("<|bos|>");
  ASSERT_TRUE(bos.has_value());
  StreamingDecoder keep(**tokenizer);
  StreamingDecoder skip(**tokenizer, /*skip_special_tokens=*/true);
  EXPECT_EQ(*keep.Push(*bos), "<|bos|>");
  EXPECT_EQ(*skip.Push(*bos), "");
  EXPECT_EQ(*skip.Push('x'), "x");
}

}  // namespace
}  // namespace millipede
