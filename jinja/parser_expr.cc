// Expressions, by Jinja's precedence (loosest first): a if b else c; or; and; not; comparisons
// and `in`; + -; ~; * / // %; **; unary - +; then primaries (literals, names, lists, dicts,
// parentheses). Their postfix forms are in parser_postfix.cc.
#include <algorithm>

#include "jinja/parser_impl.h"

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

StatusOr<ExprPtr> Parser::ParseExpression(bool with_condition) {
  Level level(&depth_);
  if (level.TooDeep()) return Fail(Current().offset, "expression nests too deeply");
  MP_ASSIGN_OR_RETURN(ExprPtr node, ParseOr());
  if (!with_condition) return node;
  while (IsName("if")) {
    auto cond = MakeExpr(Expr::Kind::kCondition, Current().offset);
    Advance();
    MP_ASSIGN_OR_RETURN(ExprPtr test, ParseOr());
    ExprPtr otherwise;
    if (IsName("else")) {
      Advance();
      MP_ASSIGN_OR_RETURN(otherwise, ParseExpression());
    }
    cond->args.push_back(std::move(node));
    cond->args.push_back(std::move(test));
    cond->args.push_back(std::move(otherwise));
    node = std::move(cond);
  }
  return node;
}

StatusOr<ExprPtr> Parser::ParseTuple(bool with_condition, bool explicit_parentheses,
                                     std::initializer_list<std::string_view> end_names) {
  const size_t offset = Current().offset;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  auto at_end = [&] {
    const Token& t = Current();
    if (t.kind == TokenKind::kVariableEnd || t.kind == TokenKind::kBlockEnd ||
        t.kind == TokenKind::kEnd || (t.kind == TokenKind::kOperator && t.text == ")")) {
      return true;
    }
    return t.kind == TokenKind::kName &&
           std::find(end_names.begin(), end_names.end(), t.text) != end_names.end();
  };
  while (true) {
    if (!items.empty()) MP_RETURN_IF_ERROR(Expect(","));
    if (at_end()) break;
    MP_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(with_condition));
    items.push_back(std::move(item));
    if (!IsOperator(",")) break;
    is_tuple = true;
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items.front());
    if (!explicit_parentheses) {
      return Fail(Current().offset, "expected an expression, found " + Describe(Current()));
    }
  }
  auto tuple = MakeExpr(Expr::Kind::kTuple, offset);
  tuple->args = std::move(items);
  return tuple;
}

StatusOr<ExprPtr> Parser::ParseOr() {
  MP_ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
  while (IsName("or")) {
    auto e = MakeExpr(Expr::Kind::kOr, Current().offset);
    Advance();
    MP_ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    left = std::move(e);
  }
  return left;
}

StatusOr<ExprPtr> Parser::ParseAnd() {
  MP_ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
  while (IsName("and")) {
    auto e = MakeExpr(Expr::Kind::kAnd, Current().offset);
    Advance();
    MP_ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    left = std::move(e);
  }
  return left;
}

StatusOr<ExprPtr> Parser::ParseNot() {
  if (!IsName("not")) return ParseCompare();
  Level level(&depth_);
  if (level.TooDeep()) return Fail(Current().offset, "expression nests too deeply");
  auto e = MakeExpr(Expr::Kind::kNot, Current().offset);
  Advance();
  MP_ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
  e->args.push_back(std::move(operand));
  return e;
}

StatusOr<ExprPtr> Parser::ParseCompare() {
  const size_t offset = Current().offset;
  MP_ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
  ExprPtr compare;
  while (true) {
    std::string op;
    if (IsCompareOperator(Current())) {
      op = Current().text;
      Advance();
    } else if (IsName("in")) {
      op = "in";
      Advance();
    } else if (IsName("not") && Peek().kind == TokenKind::kName && Peek().text == "in") {
      op = "not in";
      Advance();
      Advance();
    } else {
      break;
    }
    if (!compare) {
      compare = MakeExpr(Expr::Kind::kCompare, offset);
      compare->args.push_back(std::move(first));
    }
    MP_ASSIGN_OR_RETURN(ExprPtr operand, ParseMath1());
    compare->ops.push_back(op);
    compare->args.push_back(std::move(operand));
  }
  return compare ? std::move(compare) : std::move(first);
}

StatusOr<ExprPtr> Parser::ParseMath1() {
  MP_ASSIGN_OR_RETURN(ExprPtr left, ParseConcat());
  while (IsOperator("+") || IsOperator("-")) {
    const std::string op = Current().text;
    const size_t offset = Current().offset;
    Advance();
    MP_ASSIGN_OR_RETURN(ExprPtr right, ParseConcat());
    left = Binary(op, std::move(left), std::move(right), offset);
  }
  return left;
}

StatusOr<ExprPtr> Parser::ParseConcat() {
  MP_ASSIGN_OR_RETURN(ExprPtr left, ParseMath2());
  while (IsOperator("~")) {
    const size_t offset = Current().offset;
    Advance();
    MP_ASSIGN_OR_RETURN(ExprPtr right, ParseMath2());
    left = Binary("~", std::move(left), std::move(right), offset);
  }
  return left;
}

StatusOr<ExprPtr> Parser::ParseMath2() {
  MP_ASSIGN_OR_RETURN(ExprPtr left, ParsePow());
  while (IsOperator("*") || IsOperator("/") || IsOperator("//") || IsOperator("%")) {
    const std::string op = Current().text;
    const size_t offset = Current().offset;
    Advance();
    MP_ASSIGN_OR_RETURN(ExprPtr right, ParsePow());
    left = Binary(op, std::move(left), std::move(right), offset);
  }
  return left;
}

StatusOr<ExprPtr> Parser::ParsePow() {
  MP_ASSIGN_OR_RETURN(ExprPtr left, ParseUnary(/*with_filter=*/true));
  while (IsOperator("**")) {
    const size_t offset = Current().offset;
    Advance();
    MP_ASSIGN_OR_RETURN(ExprPtr right, ParseUnary(/*with_filter=*/true));
    left = Binary("**", std::move(left), std::move(right), offset);
  }
  return left;
}

StatusOr<ExprPtr> Parser::ParseUnary(bool with_filter) {
  Level level(&depth_);
  if (level.TooDeep()) return Fail(Current().offset, "expression nests too deeply");
  ExprPtr node;
  if (IsOperator("-") || IsOperator("+")) {
    node = MakeExpr(IsOperator("-") ? Expr::Kind::kNegate : Expr::Kind::kPlus, Current().offset);
    Advance();
    MP_ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(/*with_filter=*/false));
    node->args.push_back(std::move(operand));
  } else {
    MP_ASSIGN_OR_RETURN(node, ParsePrimary());
  }
  MP_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
  if (with_filter) return ParseFilterExpr(std::move(node));
  return node;
}

StatusOr<ExprPtr> Parser::ParsePrimary() {
  const Token& t = Current();
  const size_t offset = t.offset;
  if (t.kind == TokenKind::kName) {
    auto e = MakeExpr(Expr::Kind::kLiteral, offset);
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
    Advance();
    return e;
  }
  if (t.kind == TokenKind::kString) {
    std::string text;
    while (Current().kind == TokenKind::kString) {  // adjacent literals join, as in Python
      text += Current().text;
      Advance();
    }
    auto e = MakeExpr(Expr::Kind::kLiteral, offset);
    e->literal = Value::String(std::move(text));
    return e;
  }
  if (t.kind == TokenKind::kInteger || t.kind == TokenKind::kFloat) {
    auto e = MakeExpr(Expr::Kind::kLiteral, offset);
    e->literal = t.kind == TokenKind::kInteger ? Value::Int(t.integer) : Value::Float(t.number);
    Advance();
    return e;
  }
  if (IsOperator("(")) {
    Advance();
    MP_ASSIGN_OR_RETURN(ExprPtr inner, ParseTuple(/*with_condition=*/true, true));
    MP_RETURN_IF_ERROR(Expect(")"));
    return inner;
  }
  if (IsOperator("[")) return ParseList(offset);
  if (IsOperator("{")) return ParseDict(offset);
  return Fail(offset, "expected an expression, found " + Describe(t));
}

StatusOr<ExprPtr> Parser::ParseList(size_t offset) {
  auto list = MakeExpr(Expr::Kind::kList, offset);
  Advance();
  while (!IsOperator("]")) {
    if (!list->args.empty()) MP_RETURN_IF_ERROR(Expect(","));
    if (IsOperator("]")) break;
    MP_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
    list->args.push_back(std::move(item));
  }
  Advance();
  return list;
}

StatusOr<ExprPtr> Parser::ParseDict(size_t offset) {
  auto dict = MakeExpr(Expr::Kind::kDict, offset);
  Advance();
  while (!IsOperator("}")) {
    if (!dict->args.empty()) MP_RETURN_IF_ERROR(Expect(","));
    if (IsOperator("}")) break;
    MP_ASSIGN_OR_RETURN(ExprPtr key, ParseExpression());
    MP_RETURN_IF_ERROR(Expect(":"));
    MP_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
    dict->args.push_back(std::move(key));
    dict->args.push_back(std::move(value));
  }
  Advance();
  return dict;
}

}  // namespace millipede::jinja::internal
