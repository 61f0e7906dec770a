// The template parser: tokens to statements and expressions (Jinja's grammar, the subset this
// engine implements). Implemented in parser/: a statement parser and an expression parser that
// share one token cursor.
#pragma once

#include <string_view>
#include <vector>

#include "common/status.h"
#include "jinja/ast.h"
#include "jinja/lexer.h"

namespace millipede::jinja {

// Deepest nesting of expressions and of statement blocks the parser accepts (a bound on the
// recursion of parsing and of evaluation).
inline constexpr int kMaxNesting = 100;

// Parses `tokens` (from Lex over `source`). Errors name the construct and its position ("line
// L, column C: ..."): syntax errors, tags this engine does not implement ({% macro %},
// {% include %}, ...), break/continue outside a loop, unclosed blocks.
StatusOr<Body> Parse(std::string_view source, const std::vector<Token>& tokens);

}  // namespace millipede::jinja
