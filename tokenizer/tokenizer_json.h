// Parsing of tokenizer.json text. The BPE vocabulary and merges (most of a real file's bytes)
// are pulled out while parsing instead of becoming JSON DOM nodes, which roughly halves the
// time to load a large tokenizer.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/json_util.h"
#include "common/status.h"

namespace millipede::tokenizer_internal {

struct RawVocabEntry {
  std::string token;
  int64_t id = -1;
  bool is_integer = false;  // false: the file maps this token to something else
};

struct RawMerge {
  enum class Form { kLine, kPair, kMalformed };
  Form form = Form::kMalformed;
  std::string first;   // kLine: the whole "a b" line
  std::string second;  // kPair only
  int parts = 0;       // kPair: number of strings seen
};

// model.vocab and model.merges in file order.
struct RawBpeTables {
  std::vector<RawVocabEntry> vocab;
  std::vector<RawMerge> merges;
};

struct ParsedTokenizerJson {
  // The document, in which model.vocab and model.merges are left as empty containers.
  Json json;
  RawBpeTables tables;
};

// Parses tokenizer.json `text`; `what` names it in errors.
StatusOr<ParsedTokenizerJson> ParseTokenizerJson(std::string_view text, const std::string& what);

}  // namespace millipede::tokenizer_internal
