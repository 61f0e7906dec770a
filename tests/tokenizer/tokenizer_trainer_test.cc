// TrainByteLevelBpe: the result loads, round-trips any text and is deterministic.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "common/json_util.h"
#include "tests/tokenizer/tokenizer_test_util.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/tokenizer.h"

namespace millipede {
namespace {

const std::vector<std::string> kCorpus = {
    "the cat sat on the mat. the cat ate the rat.",
    "then the other cat sat there, and the mat was theirs.",
    "Zahlen: 12345 und 67890; 東京と京都; emoji 😀😀",
};

// Random valid UTF-8 over all planes (surrogates excluded), including bytes never seen above.
std::string RandomText(std::mt19937& rng, int length) {
  std::string out;
  std::uniform_int_distribution<int> kind(0, 3);
  for (int i = 0; i < length; ++i) {
    char32_t cp = 0;
    switch (kind(rng)) {
      case 0:
        cp = std::uniform_int_distribution<int>(0, 0x7F)(rng);
        break;
      case 1:
        cp = std::uniform_int_distribution<int>(0x80, 0x7FF)(rng);
        break;
      case 2:
        cp = std::uniform_int_distribution<int>(0x800, 0xFFFF)(rng);
        break;
      default:
        cp = std::uniform_int_distribution<int>(0x10000, 0x10FFFF)(rng);
        break;
    }
    if (cp >= 0xD800 && cp < 0xE000) cp = 'x';
    tokenizer_internal::AppendUtf8(cp, &out);
  }
  return out;
}

TEST(TokenizerTrainerTest, TrainsLoadsAndRoundTrips) {
  auto json = TrainByteLevelBpe(kCorpus, 50, {"<|bos|>", "<|eos|>"});
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  auto tokenizer = Tokenizer::FromJson(*json, "trained");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  const Tokenizer& t = **tokenizer;

  auto parsed = ParseJson(*json, "trained");
  ASSERT_TRUE(parsed.ok());
  size_t merges = (*parsed)["model"]["merges"].size();
  EXPECT_GT(merges, 10u);
  EXPECT_LE(merges, 50u);
  EXPECT_EQ(t.TokenToId("<|bos|>"), t.vocab_size() - 2);
  EXPECT_EQ(t.TokenToId("<|eos|>"), t.vocab_size() - 1);
  EXPECT_TRUE(t.IsSpecial(t.vocab_size() - 1));
  EXPECT_EQ(t.TokenToId(tokenizer_test::ByteLevel(" ")), 32);

  // Learned merges shorten familiar text.
  auto the_cat = t.Encode("the cat sat on the mat");
  ASSERT_TRUE(the_cat.ok());
  EXPECT_LT(the_cat->size(), 15u);

  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {
    std::string text = RandomText(rng, 1 + i % 40);
    if (i % 7 == 0) text += "<|eos|>";
    auto ids = t.Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    auto back = t.Decode(*ids);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(*back, text);
  }
}

TEST(TokenizerTrainerTest, IsDeterministic) {
  auto a = TrainByteLevelBpe(kCorpus, 12, {"<s>"});
  auto b = TrainByteLevelBpe(kCorpus, 12, {"<s>"});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  auto c = TrainByteLevelBpe(kCorpus, 11, {"<s>"});
  ASSERT_TRUE(c.ok());
  EXPECT_NE(*a, *c);
}

TEST(TokenizerTrainerTest, ZeroMergesAndEmptyCorpus) {
  for (const auto& corpus : {std::vector<std::string>{}, kCorpus}) {
    auto json = TrainByteLevelBpe(corpus, 0, {});
    ASSERT_TRUE(json.ok()) << json.status().ToString();
    auto tokenizer = Tokenizer::FromJson(*json, "trained");
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
    EXPECT_EQ((*tokenizer)->vocab_size(), 256);
    auto ids = (*tokenizer)->Encode("hé");
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(*ids, (std::vector<int32_t>{'h', 0xC3, 0xA9}));
  }
}

TEST(TokenizerTrainerTest, RejectsBadArguments) {
  EXPECT_FALSE(TrainByteLevelBpe(kCorpus, -1, {}).ok());
  EXPECT_FALSE(TrainByteLevelBpe(kCorpus, 10, {""}).ok());
  EXPECT_FALSE(TrainByteLevelBpe(kCorpus, 10, {"<s>", "<s>"}).ok());
  EXPECT_FALSE(TrainByteLevelBpe(kCorpus, 10, {"\xff"}).ok());
  auto bad = TrainByteLevelBpe({"ok", "bad \xc3"}, 10, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("corpus[1]"), std::string::npos);
}

}  // namespace
}  // namespace millipede
