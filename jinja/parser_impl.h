// The parser's state, shared by its statement half (parser.cc) and expression half
// (parser_expr.cc). Internal to jinja.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "jinja/ast.h"
#include "jinja/lexer.h"
#include "jinja/parser.h"

namespace millipede::jinja::internal {

class Parser {
 public:
  Parser(std::string_view source, const std::vector<Token>& tokens)
      : source_(source), tokens_(tokens) {}

  StatusOr<Body> ParseTemplate();

  // Expressions (parser_expr.cc).
  StatusOr<ExprPtr> ParseExpression(bool with_condition = true);
  // Comma-separated expressions: a tuple when there is a comma. Ends before }}, %}, ) or a name
  // in `end_names`.
  StatusOr<ExprPtr> ParseTuple(bool with_condition, bool explicit_parentheses,
                               std::initializer_list<std::string_view> end_names = {});

 private:
  // Statements (parser.cc).
  StatusOr<Body> ParseBody(std::initializer_list<std::string_view> end_names, std::string* end,
                           const Token& opener);
  Status ParseStatement(Body* body);
  Status ParseIf(Stmt* stmt);
  Status ParseFor(Stmt* stmt);
  Status ParseSet(Stmt* stmt);
  StatusOr<std::vector<std::string>> ParseTargetNames(std::string_view end_name);

  // Expressions (parser_expr.cc).
  StatusOr<ExprPtr> ParseOr();
  StatusOr<ExprPtr> ParseAnd();
  StatusOr<ExprPtr> ParseNot();
  StatusOr<ExprPtr> ParseCompare();
  StatusOr<ExprPtr> ParseMath1();
  StatusOr<ExprPtr> ParseConcat();
  StatusOr<ExprPtr> ParseMath2();
  StatusOr<ExprPtr> ParsePow();
  StatusOr<ExprPtr> ParseUnary(bool with_filter);
  StatusOr<ExprPtr> ParsePrimary();
  StatusOr<ExprPtr> ParseList(size_t offset);
  StatusOr<ExprPtr> ParseDict(size_t offset);
  StatusOr<ExprPtr> ParsePostfix(ExprPtr node);
  StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node);
  StatusOr<ExprPtr> ParseSubscript(ExprPtr node);
  StatusOr<ExprPtr> ParseSubscribed();
  // `callee(args...)` at the "(": a kCall node whose first argument is the callee.
  StatusOr<ExprPtr> ParseCall(ExprPtr callee);
  Status ParseCallArgs(Expr* call);
  StatusOr<ExprPtr> ParseFilter(ExprPtr node);
  StatusOr<ExprPtr> ParseTest(ExprPtr node);

  // Token helpers.
  const Token& Current() const { return tokens_[pos_]; }
  const Token& Peek(size_t ahead = 1) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
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
  Status ExpectBlockEnd();
  Status Fail(size_t offset, const std::string& what) const;
  // "'x'" / "end of statement" / ... for messages.
  std::string Describe(const Token& token) const;
  ExprPtr MakeExpr(Expr::Kind kind, size_t offset) const;

  // Bounds recursion: every nested expression or block enters a level.
  class Level {
   public:
    explicit Level(int* depth) : depth_(depth) { ++*depth_; }
    ~Level() { --*depth_; }
    bool TooDeep() const { return *depth_ > kMaxNesting; }

   private:
    int* depth_;
  };

  std::string_view source_;
  const std::vector<Token>& tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;  // for loops around the current statement (break / continue)
};

}  // namespace millipede::jinja::internal
