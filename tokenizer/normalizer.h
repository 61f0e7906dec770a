// The tokenizer.json "normalizer" section.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/json_util.h"
#include "common/status.h"

namespace millipede::tokenizer_internal {

class Regex;

class Normalizer {
 public:
  ~Normalizer();

  // Parses the "normalizer" value: null (no normalizer, returns nullptr), NFC, Prepend, Replace
  // (String or Regex pattern) or a Sequence of supported ones. Anything else is an
  // Unimplemented error naming the type, so a file we cannot reproduce exactly is refused.
  static StatusOr<std::unique_ptr<Normalizer>> FromJson(const Json& json, const std::string& what);

  // Applies every step in order to valid UTF-8 `text`.
  StatusOr<std::string> Normalize(std::string_view text) const;

 private:
  struct Step;
  Normalizer();
  static Status CollectSteps(const Json& json, const std::string& what, int depth,
                             std::vector<Step>* steps);

  std::vector<Step> steps_;
};

}  // namespace millipede::tokenizer_internal
