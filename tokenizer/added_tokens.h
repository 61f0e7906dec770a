// The tokenizer.json "added_tokens" section: tokens that are cut out of the text before
// normalization and pre-tokenization, and their matcher.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/json_util.h"
#include "common/status.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/flat_tables.h"
#include "tokenizer/normalizer.h"

namespace millipede::tokenizer_internal {

struct AddedToken {
  int32_t id = -1;
  std::string content;  // also what the token decodes to, as in HF
  // What is looked for in normalized text (`normalized` tokens): the content, normalized.
  std::string match_form;
  bool single_word = false;  // only matches where neither neighbour is a word character
  bool lstrip = false;       // swallows the whitespace before it
  bool rstrip = false;       // swallows the whitespace after it
  bool normalized = true;    // matched in normalized text rather than in the raw input
  bool special = false;      // dropped by decode with skip_special_tokens
};

// A stretch [begin, end) of the input: an added token when token_id >= 0, else plain text.
struct Segment {
  size_t begin;
  size_t end;
  int32_t token_id;
};

// Finds added tokens leftmost-longest, without overlaps, honouring their strip and single-word
// flags the way HF's AddedVocabulary does.
class AddedTokenMatcher {
 public:
  AddedTokenMatcher();
  // `token` must outlive the matcher; `pattern` is the text to look for.
  void Add(std::string_view pattern, const AddedToken* token);
  bool empty() const { return nodes_.size() == 1; }

  // Cuts `text` (valid UTF-8) into segments covering all of it, in order, none empty.
  void Split(std::string_view text, std::vector<Segment>* segments) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;
    const AddedToken* token = nullptr;
  };
  std::vector<Node> nodes_;
  bool first_byte_[256] = {};
};

class AddedVocabulary {
 public:
  // Parses the "added_tokens" array (null or absent means none), assigning ids as HF does (see
  // the comment in FromJson).
  static StatusOr<std::unique_ptr<AddedVocabulary>> FromJson(const Json& json,
                                                             const BpeModel& model,
                                                             const Normalizer* normalizer,
                                                             const std::string& what);

  const AddedToken* FindById(int32_t id) const;
  std::optional<int32_t> FindByContent(std::string_view content) const;
  // Tokens matched in the raw input (normalized == false) and in normalized text.
  const AddedTokenMatcher& raw_matcher() const { return raw_matcher_; }
  const AddedTokenMatcher& normalized_matcher() const { return normalized_matcher_; }
  int32_t max_id() const { return max_id_; }

 private:
  std::vector<std::unique_ptr<AddedToken>> tokens_;
  std::unordered_map<int32_t, AddedToken*> by_id_;
  TokenTable by_content_;
  AddedTokenMatcher raw_matcher_;
  AddedTokenMatcher normalized_matcher_;
  int32_t max_id_ = -1;
};

}  // namespace millipede::tokenizer_internal
