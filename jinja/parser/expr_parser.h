// The expression parser: Jinja's operators by precedence, primaries (expr_parser.cc) and their
// postfix forms (expr_postfix.cc: access, calls, filters, tests). Internal to jinja.
#pragma once

#include <initializer_list>
#include <string_view>

#include "common/status.h"
#include "jinja/ast.h"
#include "jinja/parser/token_cursor.h"

namespace millipede::jinja::internal {

class ExprParser {
 public:
  // Reads from `cursor`, which the statement parser shares; it must outlive this parser.
  explicit ExprParser(TokenCursor* cursor) : cursor_(*cursor) {}

  // One expression; with `with_condition`, also `a if b else c`.
  StatusOr<ExprPtr> ParseExpression(bool with_condition = true);
  // Comma-separated expressions: a tuple when there is a comma. Ends before }}, %}, ) or a name
  // in `end_names`. `explicit_parentheses`: inside ( ), where an empty tuple is allowed.
  StatusOr<ExprPtr> ParseTuple(bool with_condition, bool explicit_parentheses,
                               std::initializer_list<std::string_view> end_names = {});

 private:
  // Operators, loosest first (expr_parser.cc).
  StatusOr<ExprPtr> ParseOr();
  StatusOr<ExprPtr> ParseAnd();
  StatusOr<ExprPtr> ParseNot();
  StatusOr<ExprPtr> ParseCompare();
  // Left-associative binary operators among `ops` (kBinary nodes) between the operands that
  // `operand()` parses.
  template <typename Operand>
  StatusOr<ExprPtr> ParseBinary(std::initializer_list<std::string_view> ops, Operand operand);
  StatusOr<ExprPtr> ParseMath1();
  StatusOr<ExprPtr> ParseConcat();
  StatusOr<ExprPtr> ParseMath2();
  StatusOr<ExprPtr> ParsePow();
  StatusOr<ExprPtr> ParseUnary(bool with_filter);
  StatusOr<ExprPtr> ParsePrimary();
  StatusOr<ExprPtr> ParseList(size_t offset);
  StatusOr<ExprPtr> ParseDict(size_t offset);

  // Postfix forms (expr_postfix.cc).
  StatusOr<ExprPtr> ParsePostfix(ExprPtr node);
  StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node);
  StatusOr<ExprPtr> ParseSubscript(ExprPtr node);
  StatusOr<ExprPtr> ParseSubscribed();
  // `callee(args...)` at the "(": a kCall node whose first argument is the callee.
  StatusOr<ExprPtr> ParseCall(ExprPtr callee);
  Status ParseCallArgs(Expr* call);
  StatusOr<ExprPtr> ParseFilter(ExprPtr node);
  StatusOr<ExprPtr> ParseTest(ExprPtr node);

  TokenCursor& cursor_;
};

}  // namespace millipede::jinja::internal
