// The template lexer: text, {{ expressions }}, {% statements %} and {# comments #}, with Jinja's
// whitespace control ({%- -%} {{- -}} {#- -#}, and the + forms) and its trim_blocks /
// lstrip_blocks options.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace millipede::jinja {

struct LexOptions {
  // Drop the first newline after a block or comment tag.
  bool trim_blocks = false;
  // Drop spaces and tabs from the start of a line up to a block or comment tag.
  bool lstrip_blocks = false;
};

enum class TokenKind {
  kText,           // text: the text
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kName,           // text: the identifier
  kString,         // text: the literal's value (escapes resolved)
  kInteger,        // integer
  kFloat,          // number
  kOperator,       // text: "+", "//", "==", "(", ...
  kEnd,            // end of the source
};

struct Token {
  TokenKind kind = TokenKind::kEnd;
  std::string text;
  int64_t integer = 0;
  double number = 0;
  size_t offset = 0;  // byte offset in the (normalized) source
};

// Jinja's view of the source: \r\n and \r become \n and one trailing newline is dropped.
std::string NormalizeSource(std::string_view source);

// Tokens of a normalized source, ending with kEnd. Errors (an unterminated tag, comment or
// string, an unexpected character, unbalanced brackets, ill-formed UTF-8) name the position.
StatusOr<std::vector<Token>> Lex(std::string_view source, const LexOptions& options);

// "line L, column C" (1-based; columns count code points) of a byte offset.
std::string DescribePosition(std::string_view source, size_t offset);

}  // namespace millipede::jinja
