// Postfix forms of expressions: attribute and item access, slices, calls with keyword arguments,
// and the filter / test chain (x | f(args), x is [not] t args).
#include "jinja/parser_impl.h"

namespace millipede::jinja::internal {

StatusOr<ExprPtr> Parser::ParseCall(ExprPtr callee) {
  auto call = MakeExpr(Expr::Kind::kCall, Current().offset);
  call->args.push_back(std::move(callee));
  MP_RETURN_IF_ERROR(ParseCallArgs(call.get()));
  return call;
}

StatusOr<ExprPtr> Parser::ParsePostfix(ExprPtr node) {
  while (true) {
    if (IsOperator(".") || IsOperator("[")) {
      MP_ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
    } else if (IsOperator("(")) {
      MP_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
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
      MP_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
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
