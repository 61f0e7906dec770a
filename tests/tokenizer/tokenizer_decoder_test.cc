// The SentencePiece-style tokenizer.json parts: Prepend/Replace normalizers, Metaspace and
// Digits pre-tokenizers, the decoder chain (ByteFallback, Fuse, Replace, Strip, Metaspace) and
// its streaming. Expected values were obtained from Hugging Face `tokenizers` 0.21 on the same
// JSON; gguf_vocab_test.py compares whole vocabularies.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "tests/tokenizer/tokenizer_test_util.h"
#include "tokenizer/tokenizer.h"

namespace millipede {
namespace {

using Ids = std::vector<int32_t>;

// Vocabulary: <unk> 0, <s> 1, </s> 2, <0x00>..<0xFF> 3..258, then "▁" 259, "a" 260, "b" 261,
// "▁a" 262, "ab" 263, "1" 264, "2" 265, "12" 266; merges ▁ a, a b, 1 2.
Json SpmJson() {
  Json vocab = Json::object();
  vocab["<unk>"] = 0;
  vocab["<s>"] = 1;
  vocab["</s>"] = 2;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  int id = 259;
  for (const char* t : {"\u2581", "a", "b", "\u2581a", "ab", "1", "2", "12"}) vocab[t] = id++;
  Json special = tokenizer_test::AddedTokenJson(1, "<s>", true);
  return Json{{"version", "1.0"},
              {"added_tokens", {special}},
              {"normalizer",
               {{"type", "Sequence"},
                {"normalizers",
                 {{{"type", "Prepend"}, {"prepend", "\u2581"}},
                  {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}}},
              {"pre_tokenizer", nullptr},
              {"post_processor", nullptr},
              {"decoder",
               {{"type", "Sequence"},
                {"decoders",
                 {{{"type", "ByteFallback"}},
                  {{"type", "Fuse"}},
                  {{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                  {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
              {"model",
               {{"type", "BPE"},
                {"unk_token", "<unk>"},
                {"fuse_unk", true},
                {"byte_fallback", true},
                {"vocab", vocab},
                {"merges", {"\u2581 a", "a b", "1 2"}}}}};
}

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

// Decodes at once and one id at a time; both must agree.
std::string Decode(const Tokenizer& t, const Ids& ids, bool skip_special = false) {
  auto text = t.Decode(ids, skip_special);
  EXPECT_TRUE(text.ok()) << text.status().ToString();
  StreamingDecoder stream(t, skip_special);
  std::string streamed;
  for (int32_t id : ids) streamed += *stream.Push(id);
  streamed += stream.Finish();
  EXPECT_EQ(streamed, text.ok() ? *text : "") << "streaming differs";
  return text.ok() ? *text : std::string();
}

void ExpectLoadError(const Json& json, StatusCode code, const std::string& needle) {
  auto tokenizer = Tokenizer::FromJson(json.dump(), "test.json");
  ASSERT_FALSE(tokenizer.ok()) << "loaded although it should not (" << needle << ")";
  EXPECT_EQ(tokenizer.status().code(), code) << tokenizer.status().ToString();
  EXPECT_NE(tokenizer.status().message().find(needle), std::string::npos)
      << tokenizer.status().message();
}

TEST(TokenizerDecoderTest, LegacyNormalizerPrependsToEachStretch) {
  auto t = Load(SpmJson());
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Encode(*t, "ab a"), (Ids{262, 261, 262}));
  EXPECT_EQ(Encode(*t, "a<s>a"), (Ids{262, 1, 262}));
  EXPECT_EQ(Encode(*t, "<s>a"), (Ids{1, 262}));
  EXPECT_EQ(Encode(*t, "a\u00e9"), (Ids{262, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(Decode(*t, {262, 261, 262}), "ab a");
  EXPECT_EQ(Decode(*t, {1, 262}), "<s> a");
  EXPECT_EQ(Decode(*t, {1, 262}, /*skip_special=*/true), "a");
  EXPECT_EQ(Decode(*t, {259, 259, 260}), " a");
}

TEST(TokenizerDecoderTest, MetaspacePreTokenizerAndDecoder) {
  Json j = SpmJson();
  j["normalizer"] = nullptr;
  for (const char* scheme : {"always", "first", "never"}) {
    SCOPED_TRACE(scheme);
    Json meta = {{"type", "Metaspace"},
                 {"replacement", "\u2581"},
                 {"prepend_scheme", scheme},
                 {"split", true}};
    j["pre_tokenizer"] = meta;
    j["decoder"] = meta;
    auto t = Load(j);
    ASSERT_NE(t, nullptr);
    const bool never = std::string(scheme) == "never";
    const bool always = std::string(scheme) == "always";
    EXPECT_EQ(Encode(*t, "a b"), never ? (Ids{260, 259, 261}) : (Ids{262, 259, 261}));
    // After an added token only "always" prepends.
    EXPECT_EQ(Encode(*t, "<s>a"), always ? (Ids{1, 262}) : (Ids{1, 260}));
    // The decoder drops the first token's replacement characters unless the scheme is never.
    EXPECT_EQ(Decode(*t, {262, 259, 261}), never ? " a b" : "a b");
    EXPECT_EQ(Decode(*t, {259, 259, 262}), never ? "   a" : "  a");
  }
  Json legacy = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"add_prefix_space", false}};
  j["pre_tokenizer"] = legacy;
  ExpectLoadError(j, StatusCode::kInvalidArgument, "add_prefix_space false");
  legacy["prepend_scheme"] = "never";
  j["pre_tokenizer"] = legacy;
  EXPECT_NE(Load(j), nullptr);
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "ab"}};
  ExpectLoadError(j, StatusCode::kInvalidArgument, "one character");
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}, {"prepend_scheme", "First"}};
  ExpectLoadError(j, StatusCode::kInvalidArgument, "\"First\"");
}

TEST(TokenizerDecoderTest, DigitsPreTokenizer) {
  Json j = SpmJson();
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Digits"}, {"individual_digits", true}};
  auto t = Load(j);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Encode(*t, "12a"), (Ids{264, 265, 260}));
  j["pre_tokenizer"] = {{"type", "Digits"}, {"individual_digits", false}};
  t = Load(j);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Encode(*t, "12a"), (Ids{266, 260}));
  j["pre_tokenizer"] = {{"type", "Digits"}};
  ExpectLoadError(j, StatusCode::kInvalidArgument, "individual_digits");
}

TEST(TokenizerDecoderTest, ByteFallbackRuns) {
  auto t = Load(SpmJson());
  ASSERT_NE(t, nullptr);
  auto b = [](unsigned char byte) { return 3 + byte; };
  EXPECT_EQ(Decode(*t, {b(0xE5), b(0x8F), b(0xAB)}), "\u53eb");
  // A run that is not UTF-8 as a whole is one U+FFFD per byte, its valid start included.
  EXPECT_EQ(Decode(*t, {b('a'), b(0xE5), b(0x8F), 260}), "\uFFFD\uFFFD\uFFFDa");
  EXPECT_EQ(Decode(*t, {b(0xE5), 260, b(0x8F)}), "\uFFFDa\uFFFD");
}

TEST(TokenizerDecoderTest, StripAndReplaceSteps) {
  Json j = SpmJson();
  auto decoders = [&](Json steps) {
    j["decoder"] = {{"type", "Sequence"}, {"decoders", steps}};
    return Load(j);
  };
  Json fb = {{"type", "ByteFallback"}};
  Json fuse = {{"type", "Fuse"}};
  Json rep = {{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}};
  auto strip = [](int start, int stop) {
    return Json{{"type", "Strip"}, {"content", " "}, {"start", start}, {"stop", stop}};
  };
  // Trailing spaces of the fused text: HF gives "ab " for (0, 1) and "ab" for (0, 2) on "ab  ".
  auto t = decoders({fb, fuse, rep, strip(0, 1)});
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Decode(*t, {260, 261, 259, 259}), "ab ");
  t = decoders({fb, fuse, rep, strip(0, 2)});
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Decode(*t, {260, 261, 259, 259}), "ab");
  EXPECT_EQ(Decode(*t, {259, 260, 259, 261, 259, 259, 259}), " a b ");
  // Leading and trailing cuts never overlap ("  " with (1, 1) is ""). HF 0.21 panics on the
  // next two, where its trailing cut runs past the token's start; here they are empty.
  t = decoders({fb, fuse, rep, strip(1, 1)});
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Decode(*t, {259, 259}), "");
  EXPECT_EQ(Decode(*t, {259}), "");
  EXPECT_EQ(Decode(*t, {}), "");
  // A multi-character pattern is matched across the tokens a Fuse joined.
  Json ab = {{"type", "Replace"}, {"pattern", {{"String", "ab"}}}, {"content", "<AB>"}};
  t = decoders({fuse, ab, rep});
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Decode(*t, {260, 261, 263, 260}), "<AB><AB>a");
  t = decoders({ab, fuse, rep});  // before the Fuse: token by token
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Decode(*t, {260, 261, 263, 260}), "ab<AB>a");

  j["decoder"] = {{"type", "Replace"}, {"pattern", {{"Regex", "a+"}}}, {"content", "b"}};
  ExpectLoadError(j, StatusCode::kUnimplemented, "Regex");
  j["decoder"] = {{"type", "Strip"}, {"content", "ab"}, {"start", 1}, {"stop", 0}};
  ExpectLoadError(j, StatusCode::kInvalidArgument, "one character");
  j["decoder"] = {{"type", "WordPiece"}};
  ExpectLoadError(j, StatusCode::kUnimplemented, "WordPiece");
  j["decoder"] = nullptr;  // tokens joined with spaces
  t = Load(j);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Decode(*t, {262, 261, 1}), "\u2581a b <s>");
}

TEST(TokenizerDecoderTest, NormalizerErrors) {
  Json j = SpmJson();
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"Regex", "("}}}, {"content", "x"}};
  ExpectLoadError(j, StatusCode::kInvalidArgument, "normalizer");
  j["normalizer"] = {{"type", "NFKC"}};
  ExpectLoadError(j, StatusCode::kUnimplemented, "NFKC");
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"Regex", " {2,}"}}}, {"content", "_"}};
  auto t = Load(j);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Encode(*t, "a   a"), (Ids{260, 3 + '_', 260}));
}

}  // namespace
}  // namespace millipede
