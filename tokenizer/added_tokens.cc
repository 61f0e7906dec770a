#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace millipede::tokenizer_internal {
namespace {

// Rust regex's Unicode \w, which HF uses to decide whether a single_word token touches a word.
bool IsWordChar(std::string_view ch) {
  static const std::unique_ptr<Regex> word = [] {
    auto compiled =
        Regex::Compile(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}])", "word characters");
    return compiled.ok() ? std::move(compiled).value() : nullptr;
  }();
  if (word == nullptr) return false;
  std::vector<std::pair<size_t, size_t>> matches;
  return word->FindAll(ch, &matches).ok() && !matches.empty();
}

// The last character of text[0, end), or an empty view at the start.
std::string_view CharBefore(std::string_view text, size_t end) {
  size_t begin = end;
  while (begin > 0 && (static_cast<unsigned char>(text[--begin]) & 0xC0) == 0x80) {
  }
  return text.substr(begin, end - begin);
}

std::string_view CharAt(std::string_view text, size_t begin) {
  if (begin >= text.size()) return {};
  return text.substr(begin, Utf8SequenceLength(static_cast<unsigned char>(text[begin])));
}

bool IsWhiteSpaceChar(std::string_view ch) {
  if (ch.empty()) return false;
  size_t pos = 0;
  return IsUnicodeWhiteSpace(DecodeUtf8At(ch, &pos));
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher() : nodes_(1) {}

void AddedTokenMatcher::Add(std::string_view pattern, const AddedToken* token) {
  if (pattern.empty()) return;
  first_byte_[static_cast<uint8_t>(pattern[0])] = true;
  int32_t node = 0;
  for (char c : pattern) {
    uint8_t byte = static_cast<uint8_t>(c);
    auto& children = nodes_[node].children;
    auto it = std::find_if(children.begin(), children.end(),
                           [byte](const auto& child) { return child.first == byte; });
    if (it != children.end()) {
      node = it->second;
      continue;
    }
    int32_t child = static_cast<int32_t>(nodes_.size());
    nodes_[node].children.emplace_back(byte, child);
    nodes_.emplace_back();
    node = child;
  }
  // The first token added for a pattern wins, mirroring a map from pattern to token.
  if (nodes_[node].token == nullptr) nodes_[node].token = token;
}

void AddedTokenMatcher::Split(std::string_view text, std::vector<Segment>* segments) const {
  if (empty()) {
    if (!text.empty()) segments->push_back({0, text.size(), -1});
    return;
  }
  size_t emitted = 0;  // everything before this offset is already in `segments`
  size_t pos = 0;
  while (pos < text.size()) {
    if (!first_byte_[static_cast<uint8_t>(text[pos])]) {
      ++pos;
      continue;
    }
    // Walk the trie for the longest token starting here.
    const AddedToken* found = nullptr;
    size_t found_end = 0;
    int32_t node = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      uint8_t byte = static_cast<uint8_t>(text[i]);
      const auto& children = nodes_[node].children;
      auto it = std::find_if(children.begin(), children.end(),
                             [byte](const auto& child) { return child.first == byte; });
      if (it == children.end()) break;
      node = it->second;
      if (nodes_[node].token != nullptr) {
        found = nodes_[node].token;
        found_end = i + 1;
      }
    }
    if (found == nullptr) {
      ++pos;
      continue;
    }
    size_t start = pos;
    size_t stop = found_end;
    // Like HF's automaton, the scan resumes after the match even when the match is discarded.
    pos = found_end;
    if (found->single_word &&
        (IsWordChar(CharBefore(text, start)) || IsWordChar(CharAt(text, stop)))) {
      continue;
    }
    if (found->lstrip) {
      while (start > emitted && IsWhiteSpaceChar(CharBefore(text, start))) {
        start -= CharBefore(text, start).size();
      }
    }
    if (found->rstrip) {
      while (stop < text.size() && IsWhiteSpaceChar(CharAt(text, stop))) {
        stop += CharAt(text, stop).size();
      }
      pos = stop;
    }
    if (start > emitted) segments->push_back({emitted, start, -1});
    segments->push_back({start, stop, found->id});
    emitted = stop;
  }
  if (emitted < text.size()) segments->push_back({emitted, text.size(), -1});
}

StatusOr<std::unique_ptr<AddedVocabulary>> AddedVocabulary::FromJson(const Json& json,
                                                                     const BpeModel& model,
                                                                     const Normalizer* normalizer,
                                                                     const std::string& what) {
  auto vocab = std::make_unique<AddedVocabulary>();
  if (json.is_null()) return vocab;
  MP_REQUIRE(json.is_array(), what, ": expected an array, got ", json.type_name());
  // Ids are assigned the way HF's AddedVocabulary does when it loads a file: a content already
  // in the model's vocabulary keeps that id, the others get consecutive ids after the model's
  // vocabulary size. The "id" fields of the file only agree with this in consistent files (all
  // files HF writes), and HF itself ignores them too.
  int32_t next_id = static_cast<int32_t>(model.vocab_entries());
  for (size_t i = 0; i < json.size(); ++i) {
    const Json& item = json[i];
    std::string where = what + "[" + std::to_string(i) + "]";
    AddedToken parsed;
    MP_ASSIGN_OR_RETURN(int64_t file_id, JsonGetInt(item, "id", where));
    MP_REQUIRE(file_id >= 0 && file_id <= INT32_MAX, where, ": id ", file_id, " is out of range");
    MP_ASSIGN_OR_RETURN(parsed.content, JsonGetString(item, "content", where));
    MP_ASSIGN_OR_RETURN(parsed.single_word, JsonGetBoolOr(item, "single_word", false, where));
    MP_ASSIGN_OR_RETURN(parsed.lstrip, JsonGetBoolOr(item, "lstrip", false, where));
    MP_ASSIGN_OR_RETURN(parsed.rstrip, JsonGetBoolOr(item, "rstrip", false, where));
    MP_ASSIGN_OR_RETURN(parsed.special, JsonGetBoolOr(item, "special", false, where));
    MP_ASSIGN_OR_RETURN(parsed.normalized,
                        JsonGetBoolOr(item, "normalized", !parsed.special, where));
    // HF skips empty contents; they could never match anything.
    if (parsed.content.empty()) continue;
    parsed.match_form = parsed.content;
    if (parsed.normalized && normalizer != nullptr) {
      MP_ASSIGN_OR_RETURN(parsed.match_form, normalizer->Normalize(parsed.content));
    }
    if (int32_t existing = vocab->by_content_.Find(parsed.content); existing >= 0) {
      // A repeated content keeps its id and takes the flags of the later entry, except that
      // once special it stays special (HF's set of special contents only grows).
      parsed.id = existing;
      parsed.special = parsed.special || vocab->by_id_[existing]->special;
      *vocab->by_id_[existing] = std::move(parsed);
      continue;
    }
    std::optional<int32_t> in_model = model.TokenToId(parsed.content);
    if (in_model) {
      parsed.id = *in_model;
    } else {
      MP_REQUIRE(next_id < INT32_MAX, where, ": too many added tokens");
      parsed.id = next_id++;
    }
    auto token = std::make_unique<AddedToken>(std::move(parsed));
    vocab->max_id_ = std::max(vocab->max_id_, token->id);
    vocab->by_id_[token->id] = token.get();
    vocab->by_content_.Insert(token->content, token->id);
    vocab->tokens_.push_back(std::move(token));
  }
  for (const auto& token : vocab->tokens_) {
    if (token->normalized) {
      vocab->normalized_matcher_.Add(token->match_form, token.get());
    } else {
      vocab->raw_matcher_.Add(token->content, token.get());
    }
  }
  return vocab;
}

const AddedToken* AddedVocabulary::FindById(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second;
}

std::optional<int32_t> AddedVocabulary::FindByContent(std::string_view content) const {
  int32_t id = by_content_.Find(content);
  if (id < 0) return std::nullopt;
  return id;
}

}  // namespace millipede::tokenizer_internal
