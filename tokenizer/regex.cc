#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/utf8.h"

namespace millipede::tokenizer_internal {
namespace {

// Oniguruma's Unicode \s is exactly White_Space: U+0009..U+000D, U+0085 and the Z categories.
constexpr char kSpaceItems[] = "\\t-\\r\\x{85}\\p{Z}";
// Oniguruma's Unicode \w: Alphabetic, marks, decimal digits and connector punctuation.
constexpr char kWordItems[] = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}";
constexpr char kHexItems[] = "0-9A-Fa-f";

// Generous enough for long whitespace runs (which make \s*[\r\n]+ backtrack once per byte), yet
// bounded so that a pathological pattern fails with an error instead of running for hours.
constexpr uint32_t kMatchLimit = 200'000'000;
constexpr size_t kJitStackMax = 64 << 20;

std::string Pcre2ErrorText(int code) {
  PCRE2_UCHAR buffer[256];
  int n = pcre2_get_error_message(code, buffer, sizeof(buffer));
  if (n < 0) return "PCRE2 error " + std::to_string(code);
  return std::string(reinterpret_cast<const char*>(buffer), static_cast<size_t>(n));
}

}  // namespace

std::string TranslateOnigurumaPattern(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      char e = pattern[++i];
      const char* items = e == 's' || e == 'S'   ? kSpaceItems
                          : e == 'w' || e == 'W' ? kWordItems
                          : e == 'h' || e == 'H' ? kHexItems
                                                 : nullptr;
      bool negated = e == 'S' || e == 'W' || e == 'H';
      if (items == nullptr || (in_class && negated)) {
        // A negated shorthand inside a class cannot be spelled out; PCRE2's own is close.
        out.push_back('\\');
        out.push_back(e);
      } else if (in_class) {
        out += items;
      } else {
        out += negated ? "[^" : "[";
        out += items;
        out += "]";
      }
      continue;
    }
    out.push_back(c);
    if (!in_class && c == '[') {
      in_class = true;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out.push_back(pattern[++i]);
    } else if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
      size_t close = pattern.find(":]", i + 2);
      if (close != std::string_view::npos) {
        out.append(pattern.substr(i + 1, close + 2 - (i + 1)));
        i = close + 1;
      }
    } else if (in_class && c == ']') {
      in_class = false;
    }
  }
  return out;
}

struct Regex::Impl {
  pcre2_code* code = nullptr;
  pcre2_match_context* context = nullptr;

  ~Impl() {
    if (context != nullptr) pcre2_match_context_free(context);
    if (code != nullptr) pcre2_code_free(code);
  }
};

Regex::~Regex() = default;

StatusOr<std::unique_ptr<Regex>> Regex::Compile(std::string_view pattern, const std::string& what) {
  std::unique_ptr<Regex> regex(new Regex());
  regex->pattern_ = std::string(pattern);
  regex->impl_ = std::make_unique<Impl>();
  std::string translated = TranslateOnigurumaPattern(pattern);
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  regex->impl_->code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                    PCRE2_UTF | PCRE2_UCP, &error, &error_offset, nullptr);
  if (regex->impl_->code == nullptr) {
    return InvalidArgumentError(what + ": bad regex /" + std::string(pattern) +
                                "/: " + Pcre2ErrorText(error) + " (near offset " +
                                std::to_string(error_offset) + " of the PCRE2 form)");
  }
  uint32_t jit_available = 0;
  pcre2_config(PCRE2_CONFIG_JIT, &jit_available);
  // JIT is only a speed-up: when it is unavailable or fails, pcre2_match interprets instead.
  if (jit_available != 0) (void)pcre2_jit_compile(regex->impl_->code, PCRE2_JIT_COMPLETE);
  regex->impl_->context = pcre2_match_context_create(nullptr);
  if (regex->impl_->context == nullptr) return ResourceExhaustedError(what + ": out of memory");
  pcre2_set_match_limit(regex->impl_->context, kMatchLimit);
  return regex;
}

Status Regex::FindAll(std::string_view text,
                      std::vector<std::pair<size_t, size_t>>* matches) const {
  // Per call (not per Regex) so that concurrent callers never share match state or JIT stacks.
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  if (data == nullptr) return ResourceExhaustedError("regex: out of memory");
  pcre2_jit_stack* jit_stack = nullptr;
  pcre2_match_context* context = impl_->context;
  pcre2_match_context* own_context = nullptr;
  Status status;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos <= text.size()) {
    int rc = pcre2_match(impl_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, data, context);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && jit_stack == nullptr) {
      // The default 32 KiB machine-stack area ran out (deep backtracking): retry with a big one.
      jit_stack = pcre2_jit_stack_create(32 << 10, kJitStackMax, nullptr);
      own_context = pcre2_match_context_copy(impl_->context);
      if (jit_stack == nullptr || own_context == nullptr) {
        status = ResourceExhaustedError("regex: out of memory for the JIT stack");
        break;
      }
      pcre2_jit_stack_assign(own_context, nullptr, jit_stack);
      context = own_context;
      continue;
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      status = ResourceExhaustedError("regex /" + pattern_ + "/ failed at byte " +
                                      std::to_string(pos) + ": " + Pcre2ErrorText(rc));
      break;
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
    size_t begin = ovector[0];
    size_t end = ovector[1];
    if (end > begin) {
      matches->emplace_back(begin, end);
      pos = end;
    } else {
      // An empty match: step over one character so the scan always makes progress.
      if (begin >= text.size()) break;
      pos = begin + Utf8SequenceLength(static_cast<unsigned char>(text[begin]));
    }
  }
  if (own_context != nullptr) pcre2_match_context_free(own_context);
  if (jit_stack != nullptr) pcre2_jit_stack_free(jit_stack);
  pcre2_match_data_free(data);
  return status;
}

}  // namespace millipede::tokenizer_internal
