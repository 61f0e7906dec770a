// Format features on small hand-made tokenizers. Expected ids were obtained from Hugging Face
// `tokenizers` 0.23 on the same JSON.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "tests/tokenizer/tokenizer_test_util.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace millipede {
namespace {

using tokenizer_test::AddedTokenJson;
using tokenizer_test::ByteLevel;
using tokenizer_test::ByteLevelTokenizerJson;
using Ids = std::vector<int32_t>;

// Merges building "hello" (259) and " world" (264).
const std::vector<std::pair<std::string, std::string>> kMerges = {
    {"h", "e"}, {"l", "l"},   {"he", "ll"}, {"hell", "o"}, {" ", "w"},
    {"o", "r"}, {" w", "or"}, {"l", "d"},   {" wor", "ld"}};

std::unique_ptr<Tokenizer> Load(const Json& json) {
  auto tokenizer = Tokenizer::FromJson(json.dump(), "test.json");
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  return tokenizer.ok() ? std::move(tokenizer).value() : nullptr;
}

Ids Encode(const Tokenizer& t, const std::string& text) {
  auto ids = t.Encode(text);
  EXPECT_TRUE(ids.ok()) << ids.status().ToString();
  return ids.ok() ? *ids : Ids{};
}

std::string Decode(const Tokenizer& t, const Ids& ids, bool skip_special) {
  auto text = t.Decode(ids, skip_special);
  EXPECT_TRUE(text.ok()) << text.status().ToString();
  return text.ok() ? *text : std::string();
}

TEST(TokenizerFeaturesTest, AddedTokenFlags) {
  Json j = ByteLevelTokenizerJson(kMerges);
  Json mask = AddedTokenJson(265, "<mask>", true);
  mask["lstrip"] = true;
  Json x = AddedTokenJson(266, "[X]", false);
  x["rstrip"] = true;
  x["normalized"] = true;
  Json ab = AddedTokenJson(267, "ab", false);
  ab["single_word"] = true;
  j["added_tokens"] = {mask, x, ab, AddedTokenJson(268, "<s>", true),
                       AddedTokenJson(269, "<s>x", false)};
  auto t = Load(j);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Encode(*t, "hello world"), (Ids{259, 264}));
  EXPECT_EQ(Encode(*t, "hello <mask> world"), (Ids{259, 265, 264}));
  EXPECT_EQ(Encode(*t, "hello<mask>world"), (Ids{259, 265, 119, 261, 263}));
  EXPECT_EQ(Encode(*t, "  <mask>"), (Ids{265}));
  EXPECT_EQ(Encode(*t, "hello\t <mask>"), (Ids{259, 265}));
  EXPECT_EQ(Encode(*t, "a\u00a0<mask>"), (Ids{97, 265}));
  EXPECT_EQ(Encode(*t, "[X]   world"), (Ids{266, 119, 261, 263}));
  EXPECT_EQ(Encode(*t, "ab ab cab abc ab."),
            (Ids{267, 32, 267, 32, 99, 97, 98, 32, 97, 98, 99, 32, 267, 46}));
  EXPECT_EQ(Encode(*t, "\u00e9 ab_"), (Ids{195, 169, 32, 97, 98, 95}));
  EXPECT_EQ(Encode(*t, "ab\u00e9 ab"), (Ids{97, 98, 195, 169, 32, 267}));
  EXPECT_EQ(Encode(*t, "<s>x<s>y"), (Ids{269, 268, 121}));  // longest match wins

  EXPECT_EQ(Decode(*t, {259, 265, 264}, false), "hello<mask> world");
  EXPECT_EQ(Decode(*t, {259, 265, 264}, true), "hello world");
  EXPECT_EQ(Decode(*t, {269, 268, 121}, true), "<s>xy");
  EXPECT_TRUE(t->IsSpecial(265));
  EXPECT_FALSE(t->IsSpecial(266));
  EXPECT_FALSE(t->IsSpecial(259));
  EXPECT_EQ(t->TokenToId("<mask>"), 265);
  EXPECT_EQ(t->TokenToId(ByteLevel(" world")), 264);
  EXPECT_EQ(t->TokenToId("nope"), std::nullopt);
  EXPECT_EQ(*t->IdToToken(264), ByteLevel(" world"));
  EXPECT_EQ(t->vocab_size(), 270);
  EXPECT_EQ(t->bos_id(), std::nullopt);
}

// HF gives added tokens ids after the model's vocabulary in file order, whatever ids the file
// states; a repeated content keeps its id and stays special once special.
TEST(TokenizerFeaturesTest, AddedTokenIdsFollowHf) {
  Json j = ByteLevelTokenizerJson(kMerges);
  j["added_tokens"] = {AddedTokenJson(300, "<a>", true), AddedTokenJson(999, "<b>", false),
                       AddedTokenJson(5, "<a>", false)};
  auto t = Load(j);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Encode(*t, "<a><b>"), (Ids{265, 266}));
  EXPECT_EQ(t->vocab_size(), 267);
  EXPECT_EQ(Decode(*t, {265, 266}, true), "<b>");
}

TEST(TokenizerFeaturesTest, MergesAsPairsEqualMergesAsStrings) {
  Json strings = ByteLevelTokenizerJson(kMerges);
  Json pairs = strings;
  Json list = Json::array();
  for (const Json& m : strings["model"]["merges"]) {
    std::string s = m.get<std::string>();
    size_t space = s.find(' ');
    list.push_back({s.substr(0, space), s.substr(space + 1)});
  }
  pairs["model"]["merges"] = list;
  auto a = Load(strings);
  auto b = Load(pairs);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  for (const char* text : {"hello world", "hellohello  worldly", "xyz"}) {
    EXPECT_EQ(Encode(*a, text), Encode(*b, text)) << text;
  }
}

TEST(TokenizerFeaturesTest, IgnoreMerges) {
  for (bool ignore : {true, false}) {
    Json j = ByteLevelTokenizerJson({{"a", "b"}});
    j["model"]["ignore_merges"] = ignore;
    j["model"]["vocab"][ByteLevel("abc")] = 300;
    j["model"]["vocab"][ByteLevel(" abc")] = 301;
    auto t = Load(j);
    ASSERT_NE(t, nullptr);
    Ids expected =
        ignore ? Ids{300, 301, 32, 256, 99, 100} : Ids{256, 99, 32, 256, 99, 32, 256, 99, 100};
    EXPECT_EQ(Encode(*t, "abc abc abcd"), expected) << "ignore_merges=" << ignore;
  }
}

TEST(TokenizerFeaturesTest, NfcNormalizerAndNormalizedAddedTokens) {
  Json j = ByteLevelTokenizerJson(kMerges);
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}}}};
  // U+1EAF (a, breve, acute) is matched after NFC; U+03A9 only where the raw input has it.
  Json a_breve_acute = AddedTokenJson(265, "\u1eaf", false);
  a_breve_acute["normalized"] = true;
  j["added_tokens"] = {a_breve_acute, AddedTokenJson(266, "\u03a9", false)};
  auto t = Load(j);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Encode(*t, "a\u0306\u0301"), (Ids{265}));
  EXPECT_EQ(Encode(*t, "\u1eaf"), (Ids{265}));
  EXPECT_EQ(Encode(*t, "\u0103\u0301"), (Ids{265}));
  EXPECT_EQ(Encode(*t, "\u2126"), (Ids{206, 169}));  // OHM SIGN normalizes to U+03A9's bytes
  EXPECT_EQ(Encode(*t, "\u03a9"), (Ids{266}));
  EXPECT_EQ(Encode(*t, "x a\u0306\u0301 \u2126\u03a9"), (Ids{120, 32, 265, 32, 206, 169, 266}));
  // Byte-level alphabet characters are vocabulary tokens: an added "\u00e9" takes id 0xE9.
  j["added_tokens"] = {a_breve_acute, AddedTokenJson(300, "\u00e9", false)};
  t = Load(j);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Encode(*t, "\u00e9"), (Ids{0xE9}));
  EXPECT_EQ(*t->Decode({0xE9}), "\uFFFD");  // it decodes as that byte, like in HF
}

// No pre-tokenizer or decoder, "##" prefix, "</w>" suffix, fused unk.
TEST(TokenizerFeaturesTest, SubwordPrefixSuffixAndUnk) {
  Json j = {{"version", "1.0"},
            {"added_tokens", Json::array()},
            {"normalizer", nullptr},
            {"pre_tokenizer", nullptr},
            {"post_processor", nullptr},
            {"decoder", nullptr},
            {"model",
             {{"type", "BPE"},
              {"unk_token", "[UNK]"},
              {"continuing_subword_prefix", "##"},
              {"end_of_word_suffix", "</w>"},
              {"fuse_unk", true},
              {"vocab",
               {{"a", 0},
                {"b", 1},
                {"c", 2},
                {"##a", 3},
                {"##b", 4},
                {"##c", 5},
                {"a</w>", 6},
                {"##a</w>", 7},
                {"##b</w>", 8},
                {"##c</w>", 9},
                {"ab", 10},
                {"abc</w>", 11},
                {"[UNK]", 12}}},
              {"merges", {"a ##b", "ab ##c</w>"}}}}};
  auto t = Load(j);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Encode(*t, "abc"), (Ids{11}));
  EXPECT_EQ(Encode(*t, "abx"), (Ids{10, 12}));
  EXPECT_EQ(Encode(*t, "xyzab"), (Ids{12, 3, 8}));
  EXPECT_EQ(Encode(*t, "ba"), (Ids{1, 7}));
  EXPECT_EQ(Decode(*t, {10, 12}, false), "ab [UNK]");
  EXPECT_EQ(Decode(*t, {12, 3, 8}, false), "[UNK] ##a ##b</w>");
  j["model"]["fuse_unk"] = false;
  auto unfused = Load(j);
  ASSERT_NE(unfused, nullptr);
  EXPECT_EQ(Encode(*unfused, "xyzab"), (Ids{12, 12, 12, 3, 8}));
}

// Characters missing from the vocabulary fall back to "<0xAB>" byte tokens when all exist.
TEST(TokenizerFeaturesTest, ByteFallback) {
  Json j = {
      {"version", "1.0"},
      {"pre_tokenizer", nullptr},
      {"decoder", nullptr},
      {"model",
       {{"type", "BPE"},
        {"unk_token", "<unk>"},
        {"byte_fallback", true},
        {"vocab", {{"<unk>", 0}, {"a", 1}, {"<0x62>", 2}, {"<0xC3>", 3}, {"<0xA9>", 4}, {"ab", 5}}},
        {"merges", Json::array()}}}};
  auto t = Load(j);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Encode(*t, "ab"), (Ids{1, 2}));
  EXPECT_EQ(Encode(*t, "abc"), (Ids{1, 2, 0}));
  EXPECT_EQ(Encode(*t, "a\u00e9"), (Ids{1, 3, 4}));
  EXPECT_EQ(Encode(*t, "\u00fc"), (Ids{0}));  // 0xBC has no byte token: unk instead
}

TEST(TokenizerFeaturesTest, BosFromTemplateProcessing) {
  Json j = ByteLevelTokenizerJson(kMerges);
  j["added_tokens"] = {AddedTokenJson(265, "<|begin|>", true)};
  Json templ = {
      {"type", "TemplateProcessing"},
      {"single",
       {{{"SpecialToken", {{"id", "<|begin|>"}, {"type_id", 0}}}},
        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"pair", Json::array()},
      {"special_tokens",
       {{"<|begin|>", {{"id", "<|begin|>"}, {"ids", {265}}, {"tokens", {"<|begin|>"}}}}}}};
  j["post_processor"] = templ;
  auto t = Load(j);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->bos_id(), 265);
  EXPECT_EQ(Encode(*t, "hello"), (Ids{259}));  // Encode never applies the template
  // EncodePrompt adds the template's BOS when asked, and only then.
  EXPECT_EQ(EncodePrompt(*t, "hello", true).value(), (Ids{265, 259}));
  EXPECT_EQ(EncodePrompt(*t, "hello", false).value(), (Ids{259}));
  EXPECT_EQ(EncodePrompt(*t, "", true).value(), (Ids{265}));
  EXPECT_FALSE(EncodePrompt(*t, "\xff", true).ok());  // invalid UTF-8 is refused either way

  j["post_processor"] = {{"type", "Sequence"},
                         {"processors", {{{"type", "ByteLevel"}, {"trim_offsets", false}}, templ}}};
  t = Load(j);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->bos_id(), 265);

  // Text first, special token after: an EOS template, not a BOS.
  templ["single"] = {{{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                     {{"SpecialToken", {{"id", "<|begin|>"}, {"type_id", 0}}}}};
  j["post_processor"] = templ;
  t = Load(j);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->bos_id(), std::nullopt);
  EXPECT_EQ(EncodePrompt(*t, "hello", true).value(), (Ids{259}));  // no BOS to add
}

TEST(TokenizerFeaturesTest, EmptyAndWhitespaceInputs) {
  auto t = Load(ByteLevelTokenizerJson(kMerges));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Encode(*t, ""), Ids{});
  EXPECT_EQ(Decode(*t, {}, false), "");
  EXPECT_EQ(Encode(*t, "   "), (Ids{32, 32, 32}));
  std::string nul("a\0b", 3);
  EXPECT_EQ(Decode(*t, Encode(*t, nul), false), nul);
}

// Encode and Decode are const and share no mutable state, so threads may use one tokenizer.
TEST(TokenizerFeaturesTest, ConcurrentUse) {
  auto t = Load(ByteLevelTokenizerJson(kMerges));
  ASSERT_NE(t, nullptr);
  const std::vector<std::string> texts = {"hello world", "  hello\n\tworld!!", "日本 hello 😀"};
  std::vector<Ids> expected;
  for (const std::string& text : texts) expected.push_back(Encode(*t, text));
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      for (int round = 0; round < 200; ++round) {
        for (size_t k = 0; k < texts.size(); ++k) {
          auto ids = t->Encode(texts[k]);
          auto text = ids.ok() ? t->Decode(*ids) : StatusOr<std::string>(ids.status());
          if (!ids.ok() || *ids != expected[k] || !text.ok() || *text != texts[k]) ++mismatches;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// HF's split behaviours on "a-b--c-" with the literal "-" (from pre_tokenizers.Split).
TEST(TokenizerFeaturesTest, SplitBehaviors) {
  using tokenizer_internal::SplitBehavior;
  const std::string text = "a-b--c-";
  std::vector<std::pair<size_t, size_t>> matches = {{1, 2}, {3, 4}, {4, 5}, {6, 7}};
  struct Case {
    SplitBehavior behavior;
    bool invert;
    std::vector<std::string> pieces;
  };
  const Case cases[] = {
      {SplitBehavior::kRemoved, false, {"a", "b", "c"}},
      {SplitBehavior::kRemoved, true, {"-", "-", "-", "-"}},
      {SplitBehavior::kIsolated, false, {"a", "-", "b", "-", "-", "c", "-"}},
      {SplitBehavior::kIsolated, true, {"a", "-", "b", "-", "-", "c", "-"}},
      {SplitBehavior::kMergedWithPrevious, false, {"a-", "b-", "-", "c-"}},
      {SplitBehavior::kMergedWithPrevious, true, {"a", "-b", "-", "-c", "-"}},
      {SplitBehavior::kMergedWithNext, false, {"a", "-b", "-", "-c", "-"}},
      {SplitBehavior::kMergedWithNext, true, {"a-", "b-", "-", "c-"}},
      {SplitBehavior::kContiguous, false, {"a", "-", "b", "--", "c", "-"}},
      {SplitBehavior::kContiguous, true, {"a", "-", "b", "--", "c", "-"}},
  };
  for (const Case& c : cases) {
    std::vector<std::string> pieces;
    tokenizer_internal::SplitAtMatches(text, matches, c.behavior, c.invert, &pieces);
    EXPECT_EQ(pieces, c.pieces) << static_cast<int>(c.behavior) << " invert=" << c.invert;
  }
}

TEST(TokenizerFeaturesTest, SplitPreTokenizerWithStringPattern) {
  Json j = ByteLevelTokenizerJson({{"a", "-"}, {"-", "b"}});
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern", {{"String", "-"}}},
         {"behavior", "MergedWithNext"},
         {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  auto t = Load(j);
  ASSERT_NE(t, nullptr);
  // Pieces "a", "-b": the "a -" merge cannot apply across the split, "- b" can.
  EXPECT_EQ(Encode(*t, "a-b"), (Ids{97, 257}));
}

}  // namespace
}  // namespace millipede
