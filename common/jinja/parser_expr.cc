// Expressions, by Jinja's precedence (loosest first): a if b else c; or; and; not; comparisons
// and `in`; + -; ~; * / // %; **; unary - +; then primaries with postfix . [] () and the
// filter / test chain (| f, is t).
#include <algorithm>

#include "common/jinja/parser_impl.h"

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

StatusOr<ExprPtr> Parser::ParsePostfix(ExprPtr node) {
  while (true) {
    if (IsOperator(".") || IsOperator("[")) {
      MP_ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
    } else if (IsOperator("(")) {
      auto call = MakeExpr(Expr::Kind::kCall, Current().offset);
      call->args.push_back(std::move(node));
      MP_RETURN_IF_ERROR(ParseCallArgs(call.get()));
      node = std::move(call);
    } else {
      return node;
    }
  }
}

StatusOr<ExprPtr> Parser::ParseFilterExpr(ExprPtr node) {
  while (true) {
    if (IsOperator("|")) {
      MP_ASSIGN_OR_RETURN(node, ParseFilter(std::move(node)));
    } else if (IsName("is")) {
      MP_ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
    } else if (IsOperator("(")) {
      auto call = MakeExpr(Expr::Kind::kCall, Current().offset);
      call->args.push_back(std::move(node));
      MP_RETURN_IF_ERROR(ParseCallArgs(call.get()));
      node = std::move(call);
    } else {
      return node;
    }
  }
}

StatusOr<ExprPtr> Parser::ParseSubscript(ExprPtr node) {
  const Token& t = Current();
  if (t.text == ".") {
    Advance();
    const Token& attr = Current();
    if (attr.kind == TokenKind::kName) {
      auto e = MakeExpr(Expr::Kind::kAttr, t.offset);
      e->name = attr.text;
      e->args.push_back(std::move(node));
      Advance();
      return e;
    }
    if (attr.kind == TokenKind::kInteger) {
      auto e = MakeExpr(Expr::Kind::kItem, t.offset);
      e->args.push_back(std::move(node));
      e->args.push_back(MakeExpr(Expr::Kind::kLiteral, attr.offset));
      e->args.back()->literal = Value::Int(attr.integer);
      Advance();
      return e;
    }
    return Fail(attr.offset, "expected an attribute name after '.', found " + Describe(attr));
  }
  Advance();  // [
  MP_ASSIGN_OR_RETURN(ExprPtr index, ParseSubscribed());
  if (IsOperator(",")) {
    return Fail(Current().offset, "subscripts with several indexes are not supported");
  }
  MP_RETURN_IF_ERROR(Expect("]"));
  index->args.insert(index->args.begin(), std::move(node));
  return index;
}

// The inside of [...]: an index (kItem) or a slice (kSlice); args[0] is left for the subject.
StatusOr<ExprPtr> Parser::ParseSubscribed() {
  const size_t offset = Current().offset;
  ExprPtr start;
  if (!IsOperator(":")) {
    MP_ASSIGN_OR_RETURN(start, ParseExpression());
    if (!IsOperator(":")) {
      auto item = MakeExpr(Expr::Kind::kItem, offset);
      item->args.push_back(std::move(start));
      return item;
    }
  }
  Advance();  // :
  auto slice = MakeExpr(Expr::Kind::kSlice, offset);
  slice->args.push_back(std::move(start));
  ExprPtr stop, step;
  if (!IsOperator("]") && !IsOperator(",") && !IsOperator(":")) {
    MP_ASSIGN_OR_RETURN(stop, ParseExpression());
  }
  if (IsOperator(":")) {
    Advance();
    if (!IsOperator("]") && !IsOperator(",")) {
      MP_ASSIGN_OR_RETURN(step, ParseExpression());
    }
  }
  slice->args.push_back(std::move(stop));
  slice->args.push_back(std::move(step));
  return slice;
}

Status Parser::ParseCallArgs(Expr* call) {
  MP_RETURN_IF_ERROR(Expect("("));
  bool first = true;
  while (!IsOperator(")")) {
    if (!first) MP_RETURN_IF_ERROR(Expect(","));
    first = false;
    if (IsOperator(")")) break;
    if (IsOperator("*") || IsOperator("**")) {
      return Fail(Current().offset, "*args and **kwargs in calls are not supported");
    }
    if (Current().kind == TokenKind::kName && Peek().kind == TokenKind::kOperator &&
        Peek().text == "=") {
      std::string key = Current().text;
      Advance();
      Advance();
      MP_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
      call->keyword.emplace_back(std::move(key), std::move(value));
      continue;
    }
    if (!call->keyword.empty()) {
      return Fail(Current().offset, "a positional argument follows a keyword argument");
    }
    MP_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
    call->args.push_back(std::move(value));
  }
  Advance();
  return OkStatus();
}

StatusOr<ExprPtr> Parser::ParseFilter(ExprPtr node) {
  Advance();  // |
  if (Current().kind != TokenKind::kName) {
    return Fail(Current().offset, "expected a filter name after '|', found " + Describe(Current()));
  }
  auto filter = MakeExpr(Expr::Kind::kFilter, Current().offset);
  filter->name = Current().text;
  filter->args.push_back(std::move(node));
  Advance();
  if (IsOperator("(")) MP_RETURN_IF_ERROR(ParseCallArgs(filter.get()));
  return filter;
}

StatusOr<ExprPtr> Parser::ParseTest(ExprPtr node) {
  auto test = MakeExpr(Expr::Kind::kTest, Current().offset);
  Advance();  // is
  if (IsName("not")) {
    test->negated = true;
    Advance();
  }
  if (Current().kind != TokenKind::kName) {
    return Fail(Current().offset, "expected a test name after 'is', found " + Describe(Current()));
  }
  test->name = Current().text;
  test->args.push_back(std::move(node));
  Advance();
  const Token& t = Current();
  if (IsOperator("(")) {
    MP_RETURN_IF_ERROR(ParseCallArgs(test.get()));
  } else if (IsName("is")) {
    return Fail(t.offset, "tests cannot be chained with 'is'");
  } else if ((t.kind == TokenKind::kName && t.text != "else" && t.text != "or" &&
              t.text != "and") ||
             t.kind == TokenKind::kString || t.kind == TokenKind::kInteger ||
             t.kind == TokenKind::kFloat || IsOperator("[") || IsOperator("{")) {
    // One argument without parentheses: `x is divisibleby 3`, `x is equalto y`.
    MP_ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
    MP_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
    test->args.push_back(std::move(arg));
  }
  return test;
}

}  // namespace millipede::jinja::internal
