#include "jinja/lexer.h"

#include <cmath>
#include <cstdlib>

#include "jinja/py_text.h"

namespace millipede::jinja {
namespace {

// Byte length of the Python whitespace character at `pos`, or 0.
size_t SpaceAt(std::string_view s, size_t pos) {
  if (pos >= s.size()) return 0;
  const auto c = static_cast<unsigned char>(s[pos]);
  if (c < 0x80) return IsPySpace(c) ? 1 : 0;
  size_t n = c < 0xE0 ? 2 : (c < 0xF0 ? 3 : 4);
  if (pos + n > s.size()) return 0;
  const std::u32string cp = DecodeUtf8(s.substr(pos, n));
  return cp.size() == 1 && IsPySpace(cp[0]) ? n : 0;
}

size_t SkipSpace(std::string_view s, size_t pos) {
  while (size_t n = SpaceAt(s, pos)) pos += n;
  return pos;
}

// Python's str.rstrip() on a byte range of valid UTF-8.
std::string_view RStrip(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    if (SpaceAt(s, start) != end - start) break;
    end = start;
  }
  return s.substr(0, end);
}

bool AllSpace(std::string_view s) {
  if (s.empty()) return false;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t n = SpaceAt(s, pos);
    if (n == 0) return false;
    pos += n;
  }
  return true;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  Lexer(std::string_view src, const LexOptions& options) : src_(src), options_(options) {}

  StatusOr<std::vector<Token>> Run() {
    if (size_t bad = FindInvalidUtf8(src_); bad != std::string_view::npos) {
      return Error(bad, "the template is not valid UTF-8");
    }
    while (pos_ < src_.size()) MP_RETURN_IF_ERROR(LexRoot());
    Emit(TokenKind::kEnd, "", src_.size());
    return std::move(tokens_);
  }

 private:
  Status Error(size_t offset, const std::string& what) const {
    return InvalidArgumentError(DescribePosition(src_, offset) + ": " + what);
  }

  void Emit(TokenKind kind, std::string text, size_t offset) {
    Token t;
    t.kind = kind;
    t.text = std::move(text);
    t.offset = offset;
    tokens_.push_back(std::move(t));
  }

  // Text up to the next tag, then the tag.
  Status LexRoot() {
    size_t at = pos_;
    while (true) {
      at = src_.find('{', at);
      if (at == std::string_view::npos || at + 1 >= src_.size()) {
        Emit(TokenKind::kText, std::string(src_.substr(pos_)), pos_);
        pos_ = src_.size();
        return OkStatus();
      }
      const char kind = src_[at + 1];
      if (kind == '{' || kind == '%' || kind == '#') break;
      ++at;
    }
    const char kind = src_[at + 1];
    const char sign = at + 2 < src_.size() ? src_[at + 2] : '\0';
    std::string_view text = src_.substr(pos_, at - pos_);
    if (sign == '-') {
      text = RStrip(text);
    } else if (sign != '+' && options_.lstrip_blocks && kind != '{') {
      const size_t line_start = text.rfind('\n') + 1;  // 0 when there is no newline
      if ((line_start > 0 || line_starting_) && AllSpace(text.substr(line_start))) {
        text = text.substr(0, line_start);
      }
    }
    if (!text.empty()) Emit(TokenKind::kText, std::string(text), pos_);
    line_starting_ = false;
    pos_ = at + 2 + (sign == '-' || sign == '+' ? 1 : 0);
    if (kind == '#') return LexComment(at);
    Emit(kind == '%' ? TokenKind::kBlockBegin : TokenKind::kVariableBegin, "", at);
    return LexTag(at, kind == '%');
  }

  // After a block or comment end: "-" eats all whitespace, "+" nothing, else trim_blocks one
  // newline.
  void AfterTagEnd(char sign) {
    const size_t before = pos_;
    if (sign == '-') {
      pos_ = SkipSpace(src_, pos_);
    } else if (sign != '+' && options_.trim_blocks && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
    }
    line_starting_ = pos_ > before && src_[pos_ - 1] == '\n';
  }

  Status LexComment(size_t begin) {
    const size_t end = src_.find("#}", pos_);
    if (end == std::string_view::npos) return Error(begin, "comment is not closed with #}");
    const char sign = end > pos_ ? src_[end - 1] : '\0';
    pos_ = end + 2;
    if (sign == '-') {
      AfterTagEnd('-');
    } else {
      AfterTagEnd(sign == '+' ? '+' : '\0');
    }
    return OkStatus();
  }

  // The end of the current tag at pos_, if it is there: its length and sign.
  bool TagEndAt(bool block, size_t* length, char* sign) const {
    const char close = block ? '%' : '}';
    std::string_view rest = src_.substr(pos_);
    *sign = '\0';
    if (rest.size() >= 3 && (rest[0] == '-' || (block && rest[0] == '+')) && rest[1] == close &&
        rest[2] == '}') {
      *sign = rest[0];
      *length = 3;
      return true;
    }
    if (rest.size() >= 2 && rest[0] == close && rest[1] == '}') {
      *length = 2;
      return true;
    }
    return false;
  }

  Status LexTag(size_t begin, bool block) {
    std::string balance;  // closing brackets expected, innermost last
    while (true) {
      pos_ = SkipSpace(src_, pos_);
      if (pos_ >= src_.size()) {
        return Error(
            begin, block ? "statement is not closed with %}" : "expression is not closed with }}");
      }
      size_t length = 0;
      char sign = '\0';
      if (balance.empty() && TagEndAt(block, &length, &sign)) {
        Emit(block ? TokenKind::kBlockEnd : TokenKind::kVariableEnd, "", pos_);
        pos_ += length;
        if (block) {
          AfterTagEnd(sign);
        } else {
          AfterTagEnd(sign == '-' ? '-' : '+');
        }
        return OkStatus();
      }
      MP_RETURN_IF_ERROR(LexTagToken(&balance));
    }
  }

  Status LexTagToken(std::string* balance) {
    const size_t start = pos_;
    const char c = src_[pos_];
    if (IsDigit(c)) return LexNumber();
    if (IsNameStart(c)) {
      while (pos_ < src_.size() && IsNameChar(src_[pos_])) ++pos_;
      Emit(TokenKind::kName, std::string(src_.substr(start, pos_ - start)), start);
      return OkStatus();
    }
    if (c == '\'' || c == '"') return LexString();
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (std::string_view op : kTwo) {
      if (src_.substr(pos_, 2) == op) {
        Emit(TokenKind::kOperator, std::string(op), start);
        pos_ += 2;
        return OkStatus();
      }
    }
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) {
      const std::u32string cp = DecodeUtf8(src_.substr(pos_, 4));
      std::string shown;
      AppendUtf8(cp.empty() ? U'?' : cp[0], &shown);
      return Error(start, "unexpected character '" + shown + "'");
    }
    if (c == '(' || c == '[' || c == '{') balance->push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    if (c == ')' || c == ']' || c == '}') {
      if (balance->empty()) return Error(start, std::string("unexpected '") + c + "'");
      if (balance->back() != c) {
        return Error(start,
                     std::string("unexpected '") + c + "', expected '" + balance->back() + "'");
      }
      balance->pop_back();
    }
    Emit(TokenKind::kOperator, std::string(1, c), start);
    ++pos_;
    return OkStatus();
  }

  // Digits with single underscores between them; returns them without the underscores.
  std::string Digits(bool (*is_digit)(char)) {
    std::string out;
    while (pos_ < src_.size()) {
      if (is_digit(src_[pos_])) {
        out.push_back(src_[pos_++]);
      } else if (src_[pos_] == '_' && !out.empty() && pos_ + 1 < src_.size() &&
                 is_digit(src_[pos_ + 1])) {
        ++pos_;
      } else {
        break;
      }
    }
    return out;
  }

  Status LexNumber();
  Status LexString();
  Status LexEscape(size_t literal_start, std::string* out);

  std::string_view src_;
  LexOptions options_;
  size_t pos_ = 0;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

Status Lexer::LexNumber() {
  const size_t start = pos_;
  auto hex = [](char c) { return HexValue(c) >= 0; };
  auto oct = [](char c) { return c >= '0' && c <= '7'; };
  auto bin = [](char c) { return c == '0' || c == '1'; };
  if (src_[pos_] == '0' && pos_ + 1 < src_.size() &&
      std::string_view("xXoObB").find(src_[pos_ + 1]) != std::string_view::npos) {
    const char base_char = src_[pos_ + 1] | 0x20;
    pos_ += 2;
    const int base = base_char == 'x' ? 16 : base_char == 'o' ? 8 : 2;
    const std::string digits = Digits(base == 16 ? +hex : base == 8 ? +oct : +bin);
    if (digits.empty()) return Error(start, "invalid number literal");
    errno = 0;
    const unsigned long long v = std::strtoull(digits.c_str(), nullptr, base);
    if (errno != 0 || v > static_cast<unsigned long long>(INT64_MAX)) {
      return Error(start, "integer literal is too large");
    }
    Emit(TokenKind::kInteger, "", start);
    tokens_.back().integer = static_cast<int64_t>(v);
    return OkStatus();
  }
  std::string text = Digits(IsDigit);
  bool is_float = false;
  if (pos_ + 1 < src_.size() && src_[pos_] == '.' && IsDigit(src_[pos_ + 1])) {
    ++pos_;
    text += '.';
    text += Digits(IsDigit);
    is_float = true;
  }
  if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
    size_t p = pos_ + 1;
    if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
    if (p < src_.size() && IsDigit(src_[p])) {
      text += 'e';
      text.append(src_.substr(pos_ + 1, p - pos_ - 1));
      pos_ = p;
      text += Digits(IsDigit);
      is_float = true;
    }
  }
  if (is_float) {
    Emit(TokenKind::kFloat, "", start);
    tokens_.back().number = std::strtod(text.c_str(), nullptr);
    return OkStatus();
  }
  if (text.size() > 1 && text[0] == '0') return Error(start, "invalid number literal " + text);
  errno = 0;
  const long long v = std::strtoll(text.c_str(), nullptr, 10);
  if (errno != 0) return Error(start, "integer literal is too large");
  Emit(TokenKind::kInteger, "", start);
  tokens_.back().integer = v;
  return OkStatus();
}

Status Lexer::LexString() {
  const size_t start = pos_;
  const char quote = src_[pos_++];
  std::string value;
  while (true) {
    if (pos_ >= src_.size()) return Error(start, "string literal is not closed");
    const char c = src_[pos_];
    if (c == quote) {
      ++pos_;
      break;
    }
    if (c == '\\') {
      MP_RETURN_IF_ERROR(LexEscape(start, &value));
      continue;
    }
    value.push_back(c);
    ++pos_;
  }
  Emit(TokenKind::kString, std::move(value), start);
  return OkStatus();
}

// Python's unicode-escape decoding of one backslash sequence at pos_.
Status Lexer::LexEscape(size_t literal_start, std::string* out) {
  const size_t at = pos_;
  if (pos_ + 1 >= src_.size()) return Error(literal_start, "string literal is not closed");
  const char e = src_[pos_ + 1];
  pos_ += 2;
  static constexpr std::string_view kSimple = "\\\\''\"\"a\ab\bf\fn\nr\rt\tv\v";
  for (size_t i = 0; i < kSimple.size(); i += 2) {
    if (kSimple[i] == e) {
      out->push_back(kSimple[i + 1]);
      return OkStatus();
    }
  }
  if (e == '\n') return OkStatus();  // a backslash at the end of a line joins the lines
  if (e >= '0' && e <= '7') {
    unsigned v = e - '0';
    for (int k = 0; k < 2 && pos_ < src_.size() && src_[pos_] >= '0' && src_[pos_] <= '7'; ++k) {
      v = v * 8 + (src_[pos_++] - '0');
    }
    AppendUtf8(v, out);
    return OkStatus();
  }
  const int width = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
  if (width == 0) {
    if (e == 'N') return Error(at, "\\N{...} escapes are not supported");
    out->push_back('\\');  // an unknown escape keeps its backslash, as in Python
    pos_ -= 1;
    return OkStatus();
  }
  uint32_t v = 0;
  for (int k = 0; k < width; ++k) {
    if (pos_ >= src_.size() || HexValue(src_[pos_]) < 0) {
      return Error(at, std::string("truncated \\") + e + " escape");
    }
    v = v * 16 + HexValue(src_[pos_++]);
  }
  if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
    return Error(at, "escape names no valid character");
  }
  AppendUtf8(v, out);
  return OkStatus();
}

}  // namespace

std::string NormalizeSource(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

StatusOr<std::vector<Token>> Lex(std::string_view source, const LexOptions& options) {
  return Lexer(source, options).Run();
}

std::string DescribePosition(std::string_view source, size_t offset) {
  offset = std::min(offset, source.size());
  int64_t line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < offset; ++i) {
    if (source[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  const int64_t column = CodePointCount(source.substr(line_start, offset - line_start)) + 1;
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

}  // namespace millipede::jinja
