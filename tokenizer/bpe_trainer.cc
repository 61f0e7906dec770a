#include "tokenizer/bpe_trainer.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "tokenizer/byte_level.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace millipede {
namespace {

using tokenizer_internal::ByteLevelChar;
using OrderedJson = nlohmann::ordered_json;

uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b);
}
int32_t PairFirst(uint64_t key) { return static_cast<int32_t>(key >> 32); }
int32_t PairSecond(uint64_t key) { return static_cast<int32_t>(key & 0xFFFFFFFFu); }

struct Word {
  std::vector<int32_t> symbols;
  int64_t count;
};

// Pair frequencies over all words, kept up to date as merges rewrite words.
class PairStats {
 public:
  void AddWord(const Word& word, int32_t index, int64_t sign) {
    for (size_t i = 0; i + 1 < word.symbols.size(); ++i) {
      uint64_t key = PairKey(word.symbols[i], word.symbols[i + 1]);
      counts_[key] += sign * word.count;
      if (sign > 0) where_[key].push_back(index);
    }
  }

  // The most frequent pair (smallest key on ties) and its count; count 0 when there is none.
  std::pair<uint64_t, int64_t> Best() const {
    std::pair<uint64_t, int64_t> best{0, 0};
    for (const auto& [key, count] : counts_) {
      if (count > best.second || (count == best.second && count > 0 && key < best.first)) {
        best = {key, count};
      }
    }
    return best;
  }

  // Words that contained `key` at some point (maybe no longer), sorted and without repeats.
  std::vector<int32_t> TakeWords(uint64_t key) {
    std::vector<int32_t> words = std::move(where_[key]);
    where_.erase(key);
    std::sort(words.begin(), words.end());
    words.erase(std::unique(words.begin(), words.end()), words.end());
    return words;
  }

  void Erase(uint64_t key) { counts_.erase(key); }

 private:
  std::unordered_map<uint64_t, int64_t> counts_;
  std::unordered_map<uint64_t, std::vector<int32_t>> where_;
};

// Replaces every non-overlapping (a, b), left to right, with `merged`.
void MergeInWord(int32_t a, int32_t b, int32_t merged, std::vector<int32_t>* symbols) {
  size_t out = 0;
  for (size_t i = 0; i < symbols->size(); ++i) {
    if (i + 1 < symbols->size() && (*symbols)[i] == a && (*symbols)[i + 1] == b) {
      (*symbols)[out++] = merged;
      ++i;
    } else {
      (*symbols)[out++] = (*symbols)[i];
    }
  }
  symbols->resize(out);
}

StatusOr<std::vector<Word>> CountWords(const std::vector<std::string>& corpus) {
  MP_ASSIGN_OR_RETURN(auto regex,
                      tokenizer_internal::Regex::Compile(tokenizer_internal::kLlama3SplitPattern,
                                                         "TrainByteLevelBpe"));
  // An ordered map keeps the word order, and so every tie-break, independent of hashing.
  std::map<std::string, int64_t> counts;
  std::vector<std::pair<size_t, size_t>> matches;
  std::vector<std::string> pieces;
  for (size_t i = 0; i < corpus.size(); ++i) {
    size_t bad = tokenizer_internal::FindInvalidUtf8(corpus[i]);
    MP_REQUIRE(bad == std::string::npos, "TrainByteLevelBpe: corpus[", i,
               "] is not valid UTF-8 (byte offset ", bad, ")");
    matches.clear();
    pieces.clear();
    MP_RETURN_IF_ERROR(regex->FindAll(corpus[i], &matches));
    tokenizer_internal::SplitAtMatches(
        corpus[i], matches, tokenizer_internal::SplitBehavior::kIsolated, false, &pieces);
    for (std::string& piece : pieces) ++counts[std::move(piece)];
  }
  std::vector<Word> words;
  words.reserve(counts.size());
  for (const auto& [text, count] : counts) {
    Word word{{}, count};
    for (char c : text) word.symbols.push_back(static_cast<uint8_t>(c));
    words.push_back(std::move(word));
  }
  return words;
}

OrderedJson ByteLevelJson(bool use_regex) {
  return OrderedJson{{"type", "ByteLevel"},
                     {"add_prefix_space", false},
                     {"trim_offsets", use_regex},
                     {"use_regex", use_regex}};
}

// The special tokens must be non-empty, valid UTF-8 and distinct.
Status CheckSpecialTokens(const std::vector<std::string>& special_tokens) {
  for (size_t i = 0; i < special_tokens.size(); ++i) {
    const std::string& s = special_tokens[i];
    MP_REQUIRE(!s.empty(), "TrainByteLevelBpe: special token ", i, " is empty");
    MP_REQUIRE(tokenizer_internal::FindInvalidUtf8(s) == std::string::npos,
               "TrainByteLevelBpe: special token ", i, " is not valid UTF-8");
    MP_REQUIRE(std::find(special_tokens.begin(), special_tokens.begin() + i, s) ==
                   special_tokens.begin() + i,
               "TrainByteLevelBpe: special token \"", s, "\" is listed twice");
  }
  return OkStatus();
}

// What training learned: each token's byte-level spelling by id (the 256 bytes first), the ids
// by spelling, and the merges in the order they were learned.
struct LearnedBpe {
  std::vector<std::string> tokens;
  std::unordered_map<std::string, int32_t> ids;
  std::vector<std::pair<int32_t, int32_t>> merges;
};

// Learns up to `num_merges` merges over `words`: each time the most frequent pair (smallest key
// on ties), while one occurs at least twice.
LearnedBpe LearnMerges(std::vector<Word> words, int32_t num_merges) {
  LearnedBpe bpe;
  for (int b = 0; b < 256; ++b) {
    bpe.tokens.emplace_back(ByteLevelChar(static_cast<uint8_t>(b)));
    bpe.ids.emplace(bpe.tokens.back(), b);
  }
  PairStats stats;
  for (size_t i = 0; i < words.size(); ++i) stats.AddWord(words[i], static_cast<int32_t>(i), 1);

  while (static_cast<int32_t>(bpe.merges.size()) < num_merges) {
    auto [key, count] = stats.Best();
    if (count < 2) break;
    int32_t a = PairFirst(key);
    int32_t b = PairSecond(key);
    std::string merged_text = bpe.tokens[a] + bpe.tokens[b];
    // Two merge paths can spell the same string; the token then keeps its first id.
    auto [it, inserted] = bpe.ids.emplace(merged_text, static_cast<int32_t>(bpe.tokens.size()));
    if (inserted) bpe.tokens.push_back(merged_text);
    bpe.merges.emplace_back(a, b);
    for (int32_t index : stats.TakeWords(key)) {
      Word& word = words[index];
      stats.AddWord(word, index, -1);
      MergeInWord(a, b, it->second, &word.symbols);
      stats.AddWord(word, index, 1);
    }
    stats.Erase(key);
  }
  return bpe;
}

// The added_tokens entries: a special token spelled like a learned token keeps that id, the
// others get ids after the vocabulary's, in order.
OrderedJson AddedTokensJson(const LearnedBpe& bpe, const std::vector<std::string>& special_tokens) {
  OrderedJson added = OrderedJson::array();
  int32_t next_id = static_cast<int32_t>(bpe.tokens.size());
  for (const std::string& s : special_tokens) {
    auto existing = bpe.ids.find(s);
    int32_t id = existing != bpe.ids.end() ? existing->second : next_id++;
    added.push_back(OrderedJson{{"id", id},
                                {"content", s},
                                {"single_word", false},
                                {"lstrip", false},
                                {"rstrip", false},
                                {"normalized", false},
                                {"special", true}});
  }
  return added;
}

// The "model" section: a byte-level BPE with the learned vocabulary and merges.
OrderedJson ModelJson(const LearnedBpe& bpe) {
  OrderedJson vocab = OrderedJson::object();
  for (size_t id = 0; id < bpe.tokens.size(); ++id) vocab[bpe.tokens[id]] = id;
  OrderedJson merge_list = OrderedJson::array();
  for (const auto& [a, b] : bpe.merges) merge_list.push_back(bpe.tokens[a] + " " + bpe.tokens[b]);
  return OrderedJson{{"type", "BPE"},
                     {"dropout", nullptr},
                     {"unk_token", nullptr},
                     {"continuing_subword_prefix", nullptr},
                     {"end_of_word_suffix", nullptr},
                     {"fuse_unk", false},
                     {"byte_fallback", false},
                     {"ignore_merges", false},
                     {"vocab", std::move(vocab)},
                     {"merges", std::move(merge_list)}};
}

}  // namespace

StatusOr<std::string> TrainByteLevelBpe(const std::vector<std::string>& corpus, int32_t num_merges,
                                        const std::vector<std::string>& special_tokens) {
  MP_REQUIRE(num_merges >= 0, "TrainByteLevelBpe: num_merges must be >= 0, got ", num_merges);
  MP_RETURN_IF_ERROR(CheckSpecialTokens(special_tokens));
  MP_ASSIGN_OR_RETURN(std::vector<Word> words, CountWords(corpus));
  const LearnedBpe bpe = LearnMerges(std::move(words), num_merges);

  OrderedJson split = {
      {"type", "Split"},
      {"pattern", {{"Regex", std::string(tokenizer_internal::kLlama3SplitPattern)}}},
      {"behavior", "Isolated"},
      {"invert", false}};
  OrderedJson out = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", AddedTokensJson(bpe, special_tokens)},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"}, {"pretokenizers", {std::move(split), ByteLevelJson(false)}}}},
      {"post_processor", ByteLevelJson(true)},
      {"decoder", ByteLevelJson(true)},
      {"model", ModelJson(bpe)},
  };
  return out.dump(2) + "\n";
}

}  // namespace millipede
