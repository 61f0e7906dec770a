// Expressions, by Jinja's precedence (loosest first): a if b else c; or; and; not; comparisons
// and `in`; + -; ~; * / // %; **; unary - +; then primaries (literals, names, lists, dicts,
// parentheses). Their postfix forms are in expr_postfix.cc.
#include "jinja/parser/expr_parser.h"

#include <algorithm>

namespace millipede::jinja::internal {
namespace {

bool IsCompareOperator(const Token& t) {
  static constexpr std::string_view kOps[] = {"==", "!=", "<", "<=", ">", ">="};
  return t.kind == TokenKind::kOperator &&
         std::find(std::begin(kOps), std::end(kOps), t.text) != std::end(kOps);
}

ExprPtr Binary(std::string op, ExprPtr left, ExprPtr right, size_t offset) {
  auto e = std::make_unique<Expr>();
  e->kind = Expr::Kind::kBinary;
  e->offset = offset;
  e->name = std::move(op);
  e->args.push_back(std::move(left));
  e->args.push_back(std::move(right));
  return e;
}

}  // namespace

StatusOr<ExprPtr> ExprParser::ParseExpression(bool with_condition) {
  TokenCursor::Level level(&cursor_);
  if (level.TooDeep()) return cursor_.FailHere("expression nests too deeply");
  MP_ASSIGN_OR_RETURN(ExprPtr node, ParseOr());
  if (!with_condition) return node;
  while (cursor_.IsName("if")) {
    auto cond = cursor_.MakeExpr(Expr::Kind::kCondition, cursor_.Current().offset);
    cursor_.Advance();
    MP_ASSIGN_OR_RETURN(ExprPtr test, ParseOr());
    ExprPtr otherwise;
    if (cursor_.IsName("else")) {
      cursor_.Advance();
      MP_ASSIGN_OR_RETURN(otherwise, ParseExpression());
    }
    cond->args.push_back(std::move(node));
    cond->args.push_back(std::move(test));
    cond->args.push_back(std::move(otherwise));
    node = std::move(cond);
  }
  return node;
}

StatusOr<ExprPtr> ExprParser::ParseTuple(bool with_condition, bool explicit_parentheses,
                                         std::initializer_list<std::string_view> end_names) {
  const size_t offset = cursor_.Current().offset;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  auto at_end = [&] {
    const Token& t = cursor_.Current();
    if (t.kind == TokenKind::kVariableEnd || t.kind == TokenKind::kBlockEnd ||
        t.kind == TokenKind::kEnd || (t.kind == TokenKind::kOperator && t.text == ")")) {
      return true;
    }
    return t.kind == TokenKind::kName &&
           std::find(end_names.begin(), end_names.end(), t.text) != end_names.end();
  };
  while (true) {
    if (!items.empty()) MP_RETURN_IF_ERROR(cursor_.Expect(","));
    if (at_end()) break;
    MP_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(with_condition));
    items.push_back(std::move(item));
    if (!cursor_.IsOperator(",")) break;
    is_tuple = true;
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items.front());
    if (!explicit_parentheses) return cursor_.FailExpected("an expression");
  }
  auto tuple = cursor_.MakeExpr(Expr::Kind::kTuple, offset);
  tuple->args = std::move(items);
  return tuple;
}

StatusOr<ExprPtr> ExprParser::ParseOr() {
  MP_ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
  while (cursor_.IsName("or")) {
    auto e = cursor_.MakeExpr(Expr::Kind::kOr, cursor_.Current().offset);
    cursor_.Advance();
    MP_ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    left = std::move(e);
  }
  return left;
}

StatusOr<ExprPtr> ExprParser::ParseAnd() {
  MP_ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
  while (cursor_.IsName("and")) {
    auto e = cursor_.MakeExpr(Expr::Kind::kAnd, cursor_.Current().offset);
    cursor_.Advance();
    MP_ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    left = std::move(e);
  }
  return left;
}

StatusOr<ExprPtr> ExprParser::ParseNot() {
  if (!cursor_.IsName("not")) return ParseCompare();
  TokenCursor::Level level(&cursor_);
  if (level.TooDeep()) return cursor_.FailHere("expression nests too deeply");
  auto e = cursor_.MakeExpr(Expr::Kind::kNot, cursor_.Current().offset);
  cursor_.Advance();
  MP_ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
  e->args.push_back(std::move(operand));
  return e;
}

StatusOr<ExprPtr> ExprParser::ParseCompare() {
  const size_t offset = cursor_.Current().offset;
  MP_ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
  ExprPtr compare;
  while (true) {
    std::string op;
    if (IsCompareOperator(cursor_.Current())) {
      op = cursor_.Current().text;
      cursor_.Advance();
    } else if (cursor_.IsName("in")) {
      op = "in";
      cursor_.Advance();
    } else if (cursor_.IsName("not") && cursor_.Peek().kind == TokenKind::kName &&
               cursor_.Peek().text == "in") {
      op = "not in";
      cursor_.Advance();
      cursor_.Advance();
    } else {
      break;
    }
    if (!compare) {
      compare = cursor_.MakeExpr(Expr::Kind::kCompare, offset);
      compare->args.push_back(std::move(first));
    }
    MP_ASSIGN_OR_RETURN(ExprPtr operand, ParseMath1());
    compare->ops.push_back(op);
    compare->args.push_back(std::move(operand));
  }
  return compare ? std::move(compare) : std::move(first);
}

template <typename Operand>
StatusOr<ExprPtr> ExprParser::ParseBinary(std::initializer_list<std::string_view> ops,
                                          Operand operand) {
  MP_ASSIGN_OR_RETURN(ExprPtr left, operand());
  while (std::any_of(ops.begin(), ops.end(), [&](auto op) { return cursor_.IsOperator(op); })) {
    const std::string op = cursor_.Current().text;
    const size_t offset = cursor_.Current().offset;
    cursor_.Advance();
    MP_ASSIGN_OR_RETURN(ExprPtr right, operand());
    left = Binary(op, std::move(left), std::move(right), offset);
  }
  return left;
}

StatusOr<ExprPtr> ExprParser::ParseMath1() {
  return ParseBinary({"+", "-"}, [this] { return ParseConcat(); });
}

StatusOr<ExprPtr> ExprParser::ParseConcat() {
  return ParseBinary({"~"}, [this] { return ParseMath2(); });
}

StatusOr<ExprPtr> ExprParser::ParseMath2() {
  return ParseBinary({"*", "/", "//", "%"}, [this] { return ParsePow(); });
}

StatusOr<ExprPtr> ExprParser::ParsePow() {
  return ParseBinary({"**"}, [this] { return ParseUnary(/*with_filter=*/true); });
}

StatusOr<ExprPtr> ExprParser::ParseUnary(bool with_filter) {
  TokenCursor::Level level(&cursor_);
  if (level.TooDeep()) return cursor_.FailHere("expression nests too deeply");
  ExprPtr node;
  if (cursor_.IsOperator("-") || cursor_.IsOperator("+")) {
    node = cursor_.MakeExpr(cursor_.IsOperator("-") ? Expr::Kind::kNegate : Expr::Kind::kPlus,
                            cursor_.Current().offset);
    cursor_.Advance();
    MP_ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(/*with_filter=*/false));
    node->args.push_back(std::move(operand));
  } else {
    MP_ASSIGN_OR_RETURN(node, ParsePrimary());
  }
  MP_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
  if (with_filter) return ParseFilterExpr(std::move(node));
  return node;
}

StatusOr<ExprPtr> ExprParser::ParsePrimary() {
  const Token& t = cursor_.Current();
  const size_t offset = t.offset;
  if (t.kind == TokenKind::kName) {
    auto e = cursor_.MakeExpr(Expr::Kind::kLiteral, offset);
    if (t.text == "true" || t.text == "True") {
      e->literal = Value::Bool(true);
    } else if (t.text == "false" || t.text == "False") {
      e->literal = Value::Bool(false);
    } else if (t.text == "none" || t.text == "None") {
      e->literal = Value::None();
    } else {
      e->kind = Expr::Kind::kName;
      e->name = t.text;
    }
    cursor_.Advance();
    return e;
  }
  if (t.kind == TokenKind::kString) {
    std::string text;
    while (cursor_.Current().kind == TokenKind::kString) {  // adjacent literals join, as in Python
      text += cursor_.Current().text;
      cursor_.Advance();
    }
    auto e = cursor_.MakeExpr(Expr::Kind::kLiteral, offset);
    e->literal = Value::String(std::move(text));
    return e;
  }
  if (t.kind == TokenKind::kInteger || t.kind == TokenKind::kFloat) {
    auto e = cursor_.MakeExpr(Expr::Kind::kLiteral, offset);
    e->literal = t.kind == TokenKind::kInteger ? Value::Int(t.integer) : Value::Float(t.number);
    cursor_.Advance();
    return e;
  }
  if (cursor_.IsOperator("(")) {
    cursor_.Advance();
    MP_ASSIGN_OR_RETURN(ExprPtr inner, ParseTuple(/*with_condition=*/true, true));
    MP_RETURN_IF_ERROR(cursor_.Expect(")"));
    return inner;
  }
  if (cursor_.IsOperator("[")) return ParseList(offset);
  if (cursor_.IsOperator("{")) return ParseDict(offset);
  return cursor_.Fail(offset, "expected an expression, found " + cursor_.Describe(t));
}

StatusOr<ExprPtr> ExprParser::ParseList(size_t offset) {
  auto list = cursor_.MakeExpr(Expr::Kind::kList, offset);
  cursor_.Advance();
  while (!cursor_.IsOperator("]")) {
    if (!list->args.empty()) MP_RETURN_IF_ERROR(cursor_.Expect(","));
    if (cursor_.IsOperator("]")) break;
    MP_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
    list->args.push_back(std::move(item));
  }
  cursor_.Advance();
  return list;
}

StatusOr<ExprPtr> ExprParser::ParseDict(size_t offset) {
  auto dict = cursor_.MakeExpr(Expr::Kind::kDict, offset);
  cursor_.Advance();
  while (!cursor_.IsOperator("}")) {
    if (!dict->args.empty()) MP_RETURN_IF_ERROR(cursor_.Expect(","));
    if (cursor_.IsOperator("}")) break;
    MP_ASSIGN_OR_RETURN(ExprPtr key, ParseExpression());
    MP_RETURN_IF_ERROR(cursor_.Expect(":"));
    MP_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
    dict->args.push_back(std::move(key));
    dict->args.push_back(std::move(value));
  }
  cursor_.Advance();
  return dict;
}

}  // namespace millipede::jinja::internal
