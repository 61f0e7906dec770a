#include "jinja/py_text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace millipede::jinja {
namespace {

bool InChars(char32_t cp, const std::u32string& chars) {
  return chars.find(cp) != std::u32string::npos;
}

// Code points outside ASCII that Python's case mappings leave alone: spaces, Latin-1 and general
// punctuation, and scripts without case (Hebrew, Arabic, Indic, Thai, CJK, Hangul, emoji).
bool HasNoCase(char32_t cp) {
  return IsPySpace(cp) || (cp >= 0xA1 && cp <= 0xBF && cp != 0xAA && cp != 0xB5 && cp != 0xBA) ||
         cp == 0xD7 || cp == 0xF7 || (cp >= 0x5D0 && cp <= 0x5EA) || (cp >= 0x600 && cp <= 0x6FF) ||
         (cp >= 0x900 && cp <= 0xE7F) || (cp >= 0x2010 && cp <= 0x2064) ||
         (cp >= 0x3000 && cp <= 0x9FFF) || (cp >= 0xAC00 && cp <= 0xD7A3) ||
         (cp >= 0x1F000 && cp <= 0x1FAFF);
}

}  // namespace

std::u32string DecodeUtf8(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    // A truncated last sequence (not reached for valid input) is taken byte by byte.
    if (i + tokenizer_internal::Utf8SequenceLength(static_cast<unsigned char>(text[i])) >
        text.size()) {
      out.push_back(static_cast<unsigned char>(text[i++]));
      continue;
    }
    out.push_back(tokenizer_internal::DecodeUtf8At(text, &i));
  }
  return out;
}

std::string EncodeUtf8(std::u32string_view cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) AppendUtf8(cp, &out);
  return out;
}

bool IsAscii(std::string_view text) {
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

int64_t CodePointCount(std::string_view text) {
  int64_t n = 0;
  for (char c : text) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

bool IsPySpace(char32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
  if (cp < 0x85) return false;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::string PyStrip(std::string_view text, const std::optional<std::string>& chars,
                    StripSide side) {
  // Walks in from both ends over whole characters, so that long texts are not decoded.
  const std::u32string set = chars ? DecodeUtf8(*chars) : std::u32string();
  auto strip = [&](std::string_view ch) {
    const std::u32string cp = DecodeUtf8(ch);
    return chars ? InChars(cp[0], set) : IsPySpace(cp[0]);
  };
  auto length_at = [&](size_t pos) {
    const size_t n = tokenizer_internal::Utf8SequenceLength(static_cast<unsigned char>(text[pos]));
    return std::min(n, text.size() - pos);
  };
  size_t begin = 0, end = text.size();
  if (side != StripSide::kRight) {
    while (begin < end && strip(text.substr(begin, length_at(begin)))) begin += length_at(begin);
  }
  if (side != StripSide::kLeft) {
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
      if (!strip(text.substr(start, end - start))) break;
      end = start;
    }
  }
  return std::string(text.substr(begin, end - begin));
}

StatusOr<std::vector<std::string>> PySplit(std::string_view text,
                                           const std::optional<std::string>& sep,
                                           int64_t maxsplit) {
  std::vector<std::string> parts;
  if (sep) {
    MP_REQUIRE(!sep->empty(), "split(): empty separator");
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      const size_t at = text.find(*sep, start);
      if (at == std::string_view::npos) break;
      parts.emplace_back(text.substr(start, at - start));
      start = at + sep->size();
    }
    parts.emplace_back(text.substr(start));
    return parts;
  }
  const std::u32string cps = DecodeUtf8(text);
  size_t i = 0;
  while (i < cps.size()) {
    while (i < cps.size() && IsPySpace(cps[i])) ++i;
    if (i == cps.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      parts.push_back(EncodeUtf8(std::u32string_view(cps).substr(i)));  // the rest, as it is
      break;
    }
    size_t j = i;
    while (j < cps.size() && !IsPySpace(cps[j])) ++j;
    parts.push_back(EncodeUtf8(std::u32string_view(cps).substr(i, j - i)));
    i = j;
  }
  return parts;
}

std::string PyReplace(std::string_view text, std::string_view old, std::string_view repl,
                      int64_t count) {
  std::string out;
  if (old.empty()) {
    const std::u32string cps = DecodeUtf8(text);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      if (i < cps.size()) AppendUtf8(cps[i], &out);
    }
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t at = text.find(old, start);
    if (at == std::string_view::npos) break;
    out.append(text.substr(start, at - start));
    out.append(repl);
    start = at + old.size();
    ++done;
  }
  out.append(text.substr(start));
  return out;
}

StatusOr<std::string> PyCase(std::string_view text, CaseMap map) {
  std::u32string cps = DecodeUtf8(text);
  for (char32_t cp : cps) {
    if (cp >= 0x80 && !HasNoCase(cp)) {
      return InvalidArgumentError(
          "case conversion of non-ASCII letters is not supported by this template engine");
    }
  }
  auto upper = [](char32_t c) { return c >= 'a' && c <= 'z' ? c - 32 : c; };
  auto lower = [](char32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; };
  auto is_alpha = [](char32_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  bool start = true;  // at the start of a word
  for (size_t i = 0; i < cps.size(); ++i) {
    const char32_t c = cps[i];
    switch (map) {
      case CaseMap::kUpper:
        cps[i] = upper(c);
        break;
      case CaseMap::kLower:
        cps[i] = lower(c);
        break;
      case CaseMap::kCapitalize:
        cps[i] = i == 0 ? upper(c) : lower(c);
        break;
      case CaseMap::kTitle:  // str.title(): a letter after a non-letter starts a word
        cps[i] = start ? upper(c) : lower(c);
        start = !is_alpha(c);
        break;
      case CaseMap::kJinjaTitle: {  // Jinja's |title: words begin after whitespace, - ( { [ <
        const bool separator =
            IsPySpace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
        cps[i] = separator ? c : (start ? upper(c) : lower(c));
        start = separator;
        break;
      }
    }
  }
  return EncodeUtf8(cps);
}

std::string PyFloatRepr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  if (value == 0) return std::signbit(value) ? "-0.0" : "0.0";
  char buf[64];
  // Shortest round-trip digits in scientific form: "d[.ddd]e[+-]XX".
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  std::string sci(buf, end);
  const size_t e = sci.find('e');
  std::string mantissa = sci.substr(0, e);
  const int exponent = std::stoi(sci.substr(e + 1));
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits.push_back(c);
  }
  std::string out = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp_text[16];
    std::snprintf(exp_text, sizeof(exp_text), "e%c%02d", exponent < 0 ? '-' : '+',
                  exponent < 0 ? -exponent : exponent);
    return out + exp_text;
  }
  if (exponent < 0) return out + "0." + std::string(-exponent - 1, '0') + digits;
  const size_t int_digits = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= int_digits) {
    return out + digits + std::string(int_digits - digits.size(), '0') + ".0";
  }
  return out + digits.substr(0, int_digits) + "." + digits.substr(int_digits);
}

std::string PyStringRepr(std::string_view text) {
  const bool has_single = text.find('\'') != std::string_view::npos;
  const bool has_double = text.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t cp : DecodeUtf8(text)) {
    if (cp == '\\' || cp == static_cast<char32_t>(quote)) {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else {
      // Not printable for Python: controls, NBSP, soft hyphen, separators and format marks,
      // surrogates and private use, the BOM.
      const bool hidden = cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD || cp == 0x1680 ||
                          (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
                          (cp >= 0x205F && cp <= 0x206F) || cp == 0x3000 ||
                          (cp >= 0xD800 && cp <= 0xF8FF) || cp == 0xFEFF;
      if (!hidden) {
        AppendUtf8(cp, &out);
        continue;
      }
      char esc[16];
      if (cp < 0x100) {
        std::snprintf(esc, sizeof(esc), "\\x%02x", static_cast<unsigned>(cp));
      } else {
        std::snprintf(esc, sizeof(esc), "\\u%04x", static_cast<unsigned>(cp));
      }
      out += esc;
    }
  }
  out += quote;
  return out;
}

}  // namespace millipede::jinja
