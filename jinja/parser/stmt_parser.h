// The statement parser: the template's text, {{ }} and {% %} tags, with the blocks they open;
// the expressions inside go to the expression parser, over the same token cursor. Internal to
// jinja.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "jinja/ast.h"
#include "jinja/lexer.h"
#include "jinja/parser/expr_parser.h"
#include "jinja/parser/token_cursor.h"

namespace millipede::jinja::internal {

class StmtParser {
 public:
  // `tokens` (from Lex over `source`) must outlive the parser.
  StmtParser(std::string_view source, const std::vector<Token>& tokens)
      : cursor_(source, tokens), expr_(&cursor_) {}

  // The whole template (see Parse in jinja/parser.h).
  StatusOr<Body> ParseTemplate();

 private:
  // Statements up to a {% tag %} named in `end_names` (its '{%' and name are consumed and *end
  // is set to the name), or to the end of the template when `end_names` is empty. `opener` is
  // the tag that opened the block, for the error when it is not closed.
  StatusOr<Body> ParseBody(std::initializer_list<std::string_view> end_names, std::string* end,
                           const Token& opener);
  // {{ expression }}, at the '{{'.
  Status ParseOutput(Body* body);
  // The tag after '{%'.
  Status ParseStatement(Body* body);
  Status ParseIf(Stmt* stmt);
  Status ParseFor(Stmt* stmt);
  Status ParseSet(Stmt* stmt);
  StatusOr<std::vector<std::string>> ParseTargetNames(std::string_view end_name);

  TokenCursor cursor_;
  ExprParser expr_;
  int loop_depth_ = 0;  // for loops around the current statement (break / continue)
};

}  // namespace millipede::jinja::internal
