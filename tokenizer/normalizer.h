// The tokenizer.json "normalizer" section.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/json_util.h"
#include "common/status.h"

namespace millipede::tokenizer_internal {

class Normalizer {
 public:
  enum class Step { kNfc };

  // Parses the "normalizer" value: null (no normalizer, returns nullptr), {"type": "NFC"} or a
  // {"type": "Sequence", "normalizers": [...]} of supported ones. Anything else is an
  // Unimplemented error naming the type, so a file we cannot reproduce exactly is refused.
  static StatusOr<std::unique_ptr<Normalizer>> FromJson(const Json& json, const std::string& what);

  // Applies every step in order to valid UTF-8 `text`.
  std::string Normalize(std::string_view text) const;

 private:
  std::vector<Step> steps_;
};

}  // namespace millipede::tokenizer_internal
