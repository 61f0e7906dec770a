// The tokenizer.json "model" section for {"type": "BPE"}: vocabulary, ranked merges and the
// merge loop that turns one pre-tokenized piece into ids.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/json_util.h"
#include "common/status.h"
#include "tokenizer/flat_tables.h"
#include "tokenizer/tokenizer_json.h"

namespace millipede::tokenizer_internal {

class BpeModel {
 public:
  // Builds the model from the "model" object and its vocabulary and merges, which
  // ParseTokenizerJson extracted. Merges may be "a b" strings or ["a", "b"] pairs; a merge
  // naming a token (or producing one) that is not in the vocabulary is an error, as in HF.
  // Dropout is refused because it makes encoding random.
  static StatusOr<std::unique_ptr<BpeModel>> FromJson(const Json& json, RawBpeTables tables,
                                                      const std::string& what);

  // Appends the ids of one pre-tokenized piece (non-empty, valid UTF-8). Characters missing
  // from the vocabulary become the unk token, or vanish when there is none (HF behaviour).
  void Tokenize(std::string_view piece, std::vector<int32_t>* ids) const;

  std::optional<int32_t> TokenToId(std::string_view token) const;
  // The token spelled by `id`, or nullopt when the vocabulary has no such id.
  std::optional<std::string_view> IdToToken(int32_t id) const;
  // Number of vocabulary entries (HF's get_vocab_size; not max_id + 1 for sparse ids).
  size_t vocab_entries() const { return vocab_.size(); }
  // The largest id in the vocabulary (-1 when it is empty).
  int32_t max_id() const { return static_cast<int32_t>(id_to_token_.size()) - 1; }

 private:
  Status AddMerge(std::string_view a, std::string_view b, int32_t rank,
                  const std::function<std::string()>& where);
  // Splits `piece` into initial symbols (characters with prefix/suffix, unk, byte fallback).
  void InitialSymbols(std::string_view piece, std::vector<int32_t>* symbols) const;

  TokenTable vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> id_used_;  // ids the vocabulary skips decode as unknown
  MergeTable merges_;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  int32_t unk_id_ = -1;  // -1: no unk token
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  bool byte_fallback_ = false;
  std::array<int32_t, 256> byte_fallback_ids_{};  // "<0xAB>" tokens, -1 when missing
};

}  // namespace millipede::tokenizer_internal
