// Helpers shared by the tokenizer tests.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/json_util.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace millipede::tokenizer_test {

// Where the reference tokenizer files and expected ids live (may be absent).
inline std::string ReferenceDir() { return std::string(MILLIPEDE_TESTDATA_DIR) + "/tokenizers"; }

inline bool IsValidUtf8(std::string_view text) {
  return tokenizer_internal::FindInvalidUtf8(text) == std::string_view::npos;
}

inline std::string ByteLevel(std::string_view text) {
  std::string out;
  tokenizer_internal::AppendByteLevel(text, &out);
  return out;
}

// A GPT-2 style tokenizer.json: the 256 byte symbols with ids equal to their byte values, then
// one token per merge (merges spelled in plain text, e.g. {"he", "ll"}), ByteLevel
// pre-tokenizer and decoder, no added tokens. Tests adjust the fields they exercise.
inline Json ByteLevelTokenizerJson(const std::vector<std::pair<std::string, std::string>>& merges) {
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteLevel(std::string(1, static_cast<char>(b)))] = b;
  Json merge_list = Json::array();
  for (const auto& [a, b] : merges) {
    std::string joined = ByteLevel(a + b);
    if (!vocab.contains(joined)) vocab[joined] = vocab.size();
    merge_list.push_back(ByteLevel(a) + " " + ByteLevel(b));
  }
  Json byte_level = {{"type", "ByteLevel"},
                     {"add_prefix_space", false},
                     {"trim_offsets", true},
                     {"use_regex", true}};
  return Json{{"version", "1.0"},
              {"added_tokens", Json::array()},
              {"normalizer", nullptr},
              {"pre_tokenizer", byte_level},
              {"post_processor", nullptr},
              {"decoder", byte_level},
              {"model",
               {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", vocab},
                {"merges", merge_list}}}};
}

inline Json AddedTokenJson(int id, const std::string& content, bool special) {
  return Json{{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
              {"rstrip", false}, {"normalized", false}, {"special", special}};
}

// A small tokenizer trained on a fixed multilingual corpus, with <|bos|> and <|eos|> specials.
inline std::string TrainedTokenizerJson() {
  std::vector<std::string> corpus = {
      "The quick brown fox jumps over the lazy dog. It's a test, isn't it?",
      "Byte-level BPE handles any text: 日本語, 中文, 한국어, Ελληνικά, emoji 😀🎉.",
      "def f(x):\n    return x * 2  # comment\n",
      "the the the then there these those, 123 456 7890",
  };
  auto json = TrainByteLevelBpe(corpus, 200, {"<|bos|>", "<|eos|>"});
  return json.ok() ? *json : std::string();
}

}  // namespace millipede::tokenizer_test
