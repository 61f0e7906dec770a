// The parser's position in the token stream, shared by the statement parser (stmt_parser.h) and
// the expression parser (expr_parser.h): reading and matching tokens, the nesting bound, and
// errors that name a position. Internal to jinja.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "jinja/ast.h"
#include "jinja/lexer.h"
#include "jinja/parser.h"

namespace millipede::jinja::internal {

class TokenCursor {
 public:
  // `tokens` (from Lex over `source`, ending with kEnd) must outlive the cursor.
  TokenCursor(std::string_view source, const std::vector<Token>& tokens)
      : source_(source), tokens_(tokens) {}

  const Token& Current() const { return tokens_[pos_]; }
  // The token `ahead` places on; the last (kEnd) past the end.
  const Token& Peek(size_t ahead = 1) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  // Moves to the next token; stays on the last one (kEnd).
  void Advance() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  bool IsOperator(std::string_view op) const {
    return Current().kind == TokenKind::kOperator && Current().text == op;
  }
  bool IsName(std::string_view name) const {
    return Current().kind == TokenKind::kName && Current().text == name;
  }

  // Consumes the operator, or fails naming what was found.
  Status Expect(std::string_view op);
  // Consumes a '%}', or fails naming what was found.
  Status ExpectBlockEnd();
  // InvalidArgument "line L, column C: `what`" for the position of `offset`.
  Status Fail(size_t offset, const std::string& what) const;
  // Fail at the current token.
  Status FailHere(const std::string& what) const { return Fail(Current().offset, what); }
  // Fail at the current token: "expected `what`, found <the current token>".
  Status FailExpected(std::string_view what) const;
  // "'x'" / "end of statement" / ... for messages.
  std::string Describe(const Token& token) const;
  // A new expression node of `kind` at `offset`.
  ExprPtr MakeExpr(Expr::Kind kind, size_t offset) const;

  // Bounds recursion: every nested expression or block enters a level (one count for both, up
  // to kMaxNesting).
  class Level {
   public:
    explicit Level(TokenCursor* cursor) : depth_(&cursor->depth_) { ++*depth_; }
    ~Level() { --*depth_; }
    Level(const Level&) = delete;
    Level& operator=(const Level&) = delete;
    bool TooDeep() const { return *depth_ > kMaxNesting; }

   private:
    int* depth_;
  };

 private:
  std::string_view source_;
  const std::vector<Token>& tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace millipede::jinja::internal
