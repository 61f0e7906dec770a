// PCRE2 (UTF + Unicode properties, JIT when available) behind a small Status-returning wrapper.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace millipede::tokenizer_internal {

// Rewrites the escapes whose meaning differs between Oniguruma (what Hugging Face tokenizers
// compiles tokenizer.json patterns with) and PCRE2 in UCP mode: \s (PCRE2 adds U+180E), \w
// (Oniguruma: Alphabetic, marks, decimal digits, connector punctuation) and \h
// (Oniguruma: a hex digit). Everything else is passed through: the common syntax of the two
// covers real tokenizer files, while \b and POSIX classes such as [:alpha:] keep PCRE2's
// (slightly narrower) Unicode meaning.
std::string TranslateOnigurumaPattern(std::string_view pattern);

class Regex {
 public:
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Compiles `pattern` (Oniguruma flavour, translated as above). `what` names it in errors.
  static StatusOr<std::unique_ptr<Regex>> Compile(std::string_view pattern,
                                                  const std::string& what);

  // Appends the [begin, end) byte ranges of all non-overlapping matches in `text` (valid UTF-8),
  // scanning left to right like Oniguruma's find_iter. Empty matches are skipped. Safe to call
  // from several threads at once.
  Status FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>* matches) const;

  const std::string& pattern() const { return pattern_; }

 private:
  Regex() = default;

  std::string pattern_;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace millipede::tokenizer_internal
