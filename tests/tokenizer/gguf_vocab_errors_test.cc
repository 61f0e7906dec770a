// GGUF vocabularies (tokenizer/gguf_vocab.h): bad vocabularies are refused with errors naming
// the key, good ones get the documented special tokens, BOS and decoding. The comparison with
// transformers and tokenizers on real and generated vocabularies is gguf_vocab_test.py.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "tests/tokenizer/tokenizer_test_util.h"
#include "tokenizer/gguf_vocab.h"

namespace millipede {
namespace {

using tokenizer_test::ByteLevel;
using Ids = std::vector<int32_t>;

constexpr int32_t kNormal = 1;
constexpr int32_t kUnknown = 2;
constexpr int32_t kControl = 3;
constexpr int32_t kUserDefined = 4;
constexpr int32_t kByte = 6;

// A gpt2 vocabulary: <|endoftext|> (0, control), <|tool|> (1, user-defined), the 256 byte
// symbols (2 + byte), then "he", "ll", "hell", "Ġw", "Ġwo" from the merges.
GgufVocab Gpt2Vocab() {
  GgufVocab v;
  v.model = "gpt2";
  v.pre = "gpt-2";
  v.tokens = {"<|endoftext|>", "<|tool|>"};
  v.token_types = {kControl, kUserDefined};
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(ByteLevel(std::string(1, static_cast<char>(b))));
    v.token_types.push_back(kNormal);
  }
  for (const char* t : {"he", "ll", "hell", "Ġw", "Ġwo"}) {
    v.tokens.push_back(t);
    v.token_types.push_back(kNormal);
  }
  v.merges = {"h e", "l l", "he ll", "Ġ w", "Ġw o"};
  v.bos_id = 0;
  v.eos_id = 0;
  return v;
}

int32_t Gpt2Byte(char c) { return 2 + static_cast<unsigned char>(c); }

// A llama vocabulary: <unk> <s> </s>, the byte tokens <0x00>..<0xFF> (3 + byte), then "▁",
// "a", "b", "▁a", "ab", "▁ab" and the user-defined "<tool>", scores decreasing.
GgufVocab LlamaVocab() {
  GgufVocab v;
  v.model = "llama";
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.token_types = {kUnknown, kControl, kControl};
  v.scores = {0, 0, 0};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    v.tokens.push_back(name);
    v.token_types.push_back(kByte);
    v.scores.push_back(0);
  }
  const std::vector<std::pair<std::string, float>> pieces = {
      {"\u2581ab", -1}, {"\u2581a", -2}, {"ab", -3}, {"\u2581", -4}, {"a", -5}, {"b", -6}};
  for (const auto& [piece, score] : pieces) {
    v.tokens.push_back(piece);
    v.token_types.push_back(kNormal);
    v.scores.push_back(score);
  }
  v.tokens.push_back("<tool>");
  v.token_types.push_back(kUserDefined);
  v.scores.push_back(0);
  v.bos_id = 1;
  v.eos_id = 2;
  v.unk_id = 0;
  return v;
}
constexpr int32_t kLlamaAb = 259;  // "▁ab"
constexpr int32_t kLlamaA = 260;   // "▁a"
constexpr int32_t kLlamaAbNoPrefix = 261;  // "ab"
constexpr int32_t kLlamaSpace = 262;
constexpr int32_t kLlamaTool = 265;
int32_t LlamaByte(unsigned char b) { return 3 + b; }

std::unique_ptr<Tokenizer> Build(const GgufVocab& vocab) {
  auto tokenizer = TokenizerFromGgufVocab(vocab, "test.gguf");
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  return tokenizer.ok() ? std::move(tokenizer).value() : nullptr;
}

void ExpectError(const GgufVocab& vocab, StatusCode code, const std::string& needle) {
  auto tokenizer = TokenizerFromGgufVocab(vocab, "test.gguf");
  ASSERT_FALSE(tokenizer.ok()) << "built although it should not (" << needle << ")";
  EXPECT_EQ(tokenizer.status().code(), code) << tokenizer.status().ToString();
  EXPECT_NE(tokenizer.status().message().find(needle), std::string::npos)
      << "message \"" << tokenizer.status().message() << "\" lacks \"" << needle << "\"";
  EXPECT_NE(tokenizer.status().message().find("test.gguf"), std::string::npos);
}

Ids Encode(const Tokenizer& t, const std::string& text) {
  auto ids = t.Encode(text);
  EXPECT_TRUE(ids.ok()) << ids.status().ToString();
  return ids.ok() ? *ids : Ids{};
}

std::string Decode(const Tokenizer& t, const Ids& ids, bool skip_special = false) {
  auto text = t.Decode(ids, skip_special);
  EXPECT_TRUE(text.ok()) << text.status().ToString();
  return text.ok() ? *text : std::string();
}

TEST(GgufVocabTest, Gpt2Vocabulary) {
  auto t = Build(Gpt2Vocab());
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Encode(*t, "hello wo"), (Ids{260, Gpt2Byte('o'), 262}));
  EXPECT_EQ(Encode(*t, "he<|endoftext|>ll<|tool|>"), (Ids{258, 0, 259, 1}));
  EXPECT_EQ(Decode(*t, {258, 0, 259, 1}), "he<|endoftext|>ll<|tool|>");
  EXPECT_EQ(Decode(*t, {258, 0, 259, 1}, /*skip_special=*/true), "hell<|tool|>");
  EXPECT_TRUE(t->IsSpecial(0));
  EXPECT_FALSE(t->IsSpecial(1));
  EXPECT_FALSE(t->bos_id().has_value());  // gpt2 adds no BOS by default
  EXPECT_EQ(t->vocab_size(), 263);
}

TEST(GgufVocabTest, LlamaVocabulary) {
  auto t = Build(LlamaVocab());
  ASSERT_NE(t, nullptr);
  // "▁" is prepended to each stretch of text, spaces become "▁", unknown characters fall back
  // to byte tokens.
  EXPECT_EQ(Encode(*t, "ab a"), (Ids{kLlamaAb, kLlamaA}));
  EXPECT_EQ(Encode(*t, "ab<s>a"), (Ids{kLlamaAb, 1, kLlamaA}));
  EXPECT_EQ(Encode(*t, "a\u00e9"), (Ids{kLlamaA, LlamaByte(0xC3), LlamaByte(0xA9)}));
  EXPECT_EQ(Encode(*t, "<tool>ab"), (Ids{kLlamaTool, kLlamaAb}));
  EXPECT_EQ(Decode(*t, {1, kLlamaAb, kLlamaA}), "<s> ab a");
  EXPECT_EQ(Decode(*t, {1, kLlamaAb, kLlamaA}, /*skip_special=*/true), "ab a");
  EXPECT_EQ(Decode(*t, {kLlamaA, LlamaByte(0xC3), LlamaByte(0xA9)}), "a\u00e9");
  // A run of byte tokens that is not UTF-8 as a whole gives one U+FFFD per byte.
  EXPECT_EQ(Decode(*t, {LlamaByte('x'), LlamaByte(0xC3), kLlamaA}), "\uFFFD\uFFFD a");
  EXPECT_EQ(Decode(*t, {kLlamaSpace, kLlamaSpace, kLlamaA}), "  a");  // one space stripped
  ASSERT_TRUE(t->bos_id().has_value());  // llama adds BOS by default
  EXPECT_EQ(*t->bos_id(), 1);
  EXPECT_TRUE(t->IsSpecial(0));  // unknown type
  EXPECT_FALSE(t->IsSpecial(kLlamaTool));

  GgufVocab no_prefix = LlamaVocab();
  no_prefix.add_space_prefix = false;
  t = Build(no_prefix);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Encode(*t, "ab a"), (Ids{kLlamaAbNoPrefix, kLlamaA}));
  EXPECT_EQ(Decode(*t, {kLlamaAb, kLlamaA}), " ab a");
}

TEST(GgufVocabTest, StreamingHoldsByteRunsAndStrippedSpaces) {
  auto t = Build(LlamaVocab());
  ASSERT_NE(t, nullptr);
  const Ids ids = {kLlamaSpace, LlamaByte(0xE6), LlamaByte(0x97), LlamaByte(0xA5), kLlamaA};
  StreamingDecoder stream(*t);
  std::vector<std::string> chunks;
  for (int32_t id : ids) chunks.push_back(*stream.Push(id));
  chunks.push_back(stream.Finish());
  // The leading space is stripped; the byte run is held until a non-byte token ends it.
  EXPECT_EQ(chunks, (std::vector<std::string>{"", "", "", "", "\u65e5 a", ""}));
  EXPECT_EQ(Decode(*t, ids), "\u65e5 a");
  // A copy continues independently (coordinator/text_stream.cc relies on it).
  StreamingDecoder a(*t);
  EXPECT_EQ(*a.Push(LlamaByte(0xE6)), "");
  StreamingDecoder b = a;
  EXPECT_EQ(b.Finish(), "\uFFFD");
  EXPECT_EQ(*a.Push(LlamaByte(0x97)), "");
  EXPECT_EQ(*a.Push(LlamaByte(0xA5)), "");
  EXPECT_EQ(a.Finish(), "\u65e5");
}

TEST(GgufVocabTest, BosDefaultsAndOverrides) {
  GgufVocab v = Gpt2Vocab();
  v.pre = "llama-bpe";  // llama.cpp's default for the Llama 3 names is to add BOS
  auto t = Build(v);
  ASSERT_NE(t, nullptr);
  ASSERT_TRUE(t->bos_id().has_value());
  EXPECT_EQ(*t->bos_id(), 0);
  auto ids = EncodePrompt(*t, "he", /*add_bos=*/true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (Ids{0, 258}));
  v.add_bos = false;
  t = Build(v);
  ASSERT_NE(t, nullptr);
  EXPECT_FALSE(t->bos_id().has_value());
  v = Gpt2Vocab();
  v.add_bos = true;
  t = Build(v);
  ASSERT_NE(t, nullptr);
  EXPECT_TRUE(t->bos_id().has_value());

  v = LlamaVocab();
  v.add_bos = false;
  t = Build(v);
  ASSERT_NE(t, nullptr);
  EXPECT_FALSE(t->bos_id().has_value());
  v = LlamaVocab();
  v.bos_id.reset();  // defaulted add_bos without a BOS token: none
  t = Build(v);
  ASSERT_NE(t, nullptr);
  EXPECT_FALSE(t->bos_id().has_value());
  v.add_bos = true;
  ExpectError(v, StatusCode::kInvalidArgument, "bos_token_id is missing");
  v = LlamaVocab();
  v.add_eos = true;
  v.eos_id.reset();
  ExpectError(v, StatusCode::kInvalidArgument, "eos_token_id is missing");
}

TEST(GgufVocabTest, UnknownModelAndPre) {
  GgufVocab v = Gpt2Vocab();
  v.model = "bert";
  ExpectError(v, StatusCode::kUnimplemented, "\"bert\"");
  v.model = "";
  ExpectError(v, StatusCode::kInvalidArgument, "tokenizer.ggml.model");
  v = Gpt2Vocab();
  v.pre = "banana-bpe";
  ExpectError(v, StatusCode::kUnimplemented, "\"banana-bpe\"");
  v.pre = "default";  // llama.cpp's fallback list, which this layer does not reproduce
  ExpectError(v, StatusCode::kUnimplemented, "\"default\"");
  for (const char* pre : {"", "gpt-2", "llama-bpe", "llama3", "llama-v3", "qwen2", "smollm"}) {
    v.pre = pre;
    EXPECT_NE(Build(v), nullptr) << pre;
  }
  v = LlamaVocab();
  v.pre = "anything";  // ignored for the llama model, as in llama.cpp
  EXPECT_NE(Build(v), nullptr);
}

TEST(GgufVocabTest, IdsOutOfRange) {
  GgufVocab v = Gpt2Vocab();
  const int32_t n = static_cast<int32_t>(v.tokens.size());
  v.bos_id = n;
  ExpectError(v, StatusCode::kInvalidArgument, "bos_token_id = " + std::to_string(n));
  v = Gpt2Vocab();
  v.eos_id = -1;
  ExpectError(v, StatusCode::kInvalidArgument, "eos_token_id = -1");
  v = Gpt2Vocab();
  v.unk_id = n + 5;
  ExpectError(v, StatusCode::kInvalidArgument, "unknown_token_id");
  v = Gpt2Vocab();
  v.pad_id = 1 << 30;
  ExpectError(v, StatusCode::kInvalidArgument, "padding_token_id");
}

TEST(GgufVocabTest, MismatchedArraysAndBadValues) {
  GgufVocab v = LlamaVocab();
  v.scores.pop_back();
  ExpectError(v, StatusCode::kInvalidArgument, "tokenizer.ggml.scores has");
  v = LlamaVocab();
  v.token_types.push_back(kNormal);
  ExpectError(v, StatusCode::kInvalidArgument, "tokenizer.ggml.token_type has");
  v = LlamaVocab();
  v.token_types[7] = 9;
  ExpectError(v, StatusCode::kInvalidArgument, "token_type[7] = 9");
  v = LlamaVocab();
  v.scores[4] = std::nanf("");
  ExpectError(v, StatusCode::kInvalidArgument, "scores[4] is NaN");
  v = LlamaVocab();
  v.tokens.clear();
  v.token_types.clear();
  v.scores.clear();
  ExpectError(v, StatusCode::kInvalidArgument, "tokenizer.ggml.tokens is missing or empty");
  v = LlamaVocab();
  v.tokens[260] = "\u2581ab";
  ExpectError(v, StatusCode::kInvalidArgument, "twice (ids 259 and 260)");
  v = LlamaVocab();
  v.tokens[261] = "a\xFF";
  ExpectError(v, StatusCode::kInvalidArgument, "tokens[261] is not valid UTF-8");
  v = LlamaVocab();
  v.unk_id = 261;
  v.tokens[261] = "";
  ExpectError(v, StatusCode::kInvalidArgument, "token 261 is named as a special token");
}

TEST(GgufVocabTest, BadMerges) {
  GgufVocab v = Gpt2Vocab();
  v.merges.push_back("h zzz");
  ExpectError(v, StatusCode::kInvalidArgument, "merges[5]: \"zzz\" is not in the vocabulary");
  v = Gpt2Vocab();
  v.merges.push_back("w o");  // both known, "wo" is not
  ExpectError(v, StatusCode::kInvalidArgument, "merged token \"wo\"");
  v = Gpt2Vocab();
  v.merges.push_back("hell");
  ExpectError(v, StatusCode::kInvalidArgument, "merges[5]: \"hell\" is not two tokens");
  v = Gpt2Vocab();
  v.merges.push_back("h e l");
  ExpectError(v, StatusCode::kInvalidArgument, "is not two tokens");
  v = Gpt2Vocab();
  v.merges.push_back(" he");
  ExpectError(v, StatusCode::kInvalidArgument, "is not two tokens");
  v = Gpt2Vocab();
  v.merges.clear();
  ExpectError(v, StatusCode::kInvalidArgument, "tokenizer.ggml.merges is missing");
  v = LlamaVocab();
  v.merges = {"not even checked"};  // the llama model ignores merges, as llama.cpp does
  EXPECT_NE(Build(v), nullptr);
}

TEST(GgufVocabTest, EmptyTokenStaysOutOfTheVocabulary) {
  GgufVocab v = LlamaVocab();
  v.tokens.push_back("");
  v.token_types.push_back(kControl);
  v.scores.push_back(0);
  auto t = Build(v);
  ASSERT_NE(t, nullptr);
  const int32_t empty = static_cast<int32_t>(v.tokens.size()) - 1;
  EXPECT_EQ(Decode(*t, {kLlamaA, empty}), "a");
  EXPECT_FALSE(t->IdToToken(empty).ok());
}

}  // namespace
}  // namespace millipede
