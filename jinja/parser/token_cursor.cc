#include "jinja/parser/token_cursor.h"

#include <memory>

namespace millipede::jinja::internal {

Status TokenCursor::Fail(size_t offset, const std::string& what) const {
  return InvalidArgumentError(DescribePosition(source_, offset) + ": " + what);
}

Status TokenCursor::FailExpected(std::string_view what) const {
  return FailHere("expected " + std::string(what) + ", found " + Describe(Current()));
}

std::string TokenCursor::Describe(const Token& token) const {
  switch (token.kind) {
    case TokenKind::kEnd:
      return "the end of the template";
    case TokenKind::kBlockEnd:
      return "'%}'";
    case TokenKind::kVariableEnd:
      return "'}}'";
    case TokenKind::kText:
      return "text";
    case TokenKind::kString:
      return "a string";
    case TokenKind::kInteger:
    case TokenKind::kFloat:
      return "a number";
    default:
      return "'" + token.text + "'";
  }
}

ExprPtr TokenCursor::MakeExpr(Expr::Kind kind, size_t offset) const {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->offset = offset;
  return e;
}

Status TokenCursor::Expect(std::string_view op) {
  if (!IsOperator(op)) {
    return FailExpected("'" + std::string(op) + "'");
  }
  Advance();
  return OkStatus();
}

Status TokenCursor::ExpectBlockEnd() {
  if (Current().kind != TokenKind::kBlockEnd) {
    return FailExpected("'%}'");
  }
  Advance();
  return OkStatus();
}

}  // namespace millipede::jinja::internal
