// Postfix forms of expressions: attribute and item access, slices, calls with keyword arguments,
// and the filter / test chain (x | f(args), x is [not] t args).
#include "jinja/parser/expr_parser.h"

namespace millipede::jinja::internal {

StatusOr<ExprPtr> ExprParser::ParseCall(ExprPtr callee) {
  auto call = cursor_.MakeExpr(Expr::Kind::kCall, cursor_.Current().offset);
  call->args.push_back(std::move(callee));
  MP_RETURN_IF_ERROR(ParseCallArgs(call.get()));
  return call;
}

StatusOr<ExprPtr> ExprParser::ParsePostfix(ExprPtr node) {
  while (true) {
    if (cursor_.IsOperator(".") || cursor_.IsOperator("[")) {
      MP_ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
    } else if (cursor_.IsOperator("(")) {
      MP_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
    } else {
      return node;
    }
  }
}

StatusOr<ExprPtr> ExprParser::ParseFilterExpr(ExprPtr node) {
  while (true) {
    if (cursor_.IsOperator("|")) {
      MP_ASSIGN_OR_RETURN(node, ParseFilter(std::move(node)));
    } else if (cursor_.IsName("is")) {
      MP_ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
    } else if (cursor_.IsOperator("(")) {
      MP_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
    } else {
      return node;
    }
  }
}

StatusOr<ExprPtr> ExprParser::ParseSubscript(ExprPtr node) {
  const Token& t = cursor_.Current();
  if (t.text == ".") {
    cursor_.Advance();
    const Token& attr = cursor_.Current();
    if (attr.kind == TokenKind::kName) {
      auto e = cursor_.MakeExpr(Expr::Kind::kAttr, t.offset);
      e->name = attr.text;
      e->args.push_back(std::move(node));
      cursor_.Advance();
      return e;
    }
    if (attr.kind == TokenKind::kInteger) {
      auto e = cursor_.MakeExpr(Expr::Kind::kItem, t.offset);
      e->args.push_back(std::move(node));
      e->args.push_back(cursor_.MakeExpr(Expr::Kind::kLiteral, attr.offset));
      e->args.back()->literal = Value::Int(attr.integer);
      cursor_.Advance();
      return e;
    }
    return cursor_.Fail(attr.offset,
                        "expected an attribute name after '.', found " + cursor_.Describe(attr));
  }
  cursor_.Advance();  // [
  MP_ASSIGN_OR_RETURN(ExprPtr index, ParseSubscribed());
  if (cursor_.IsOperator(",")) {
    return cursor_.FailHere("subscripts with several indexes are not supported");
  }
  MP_RETURN_IF_ERROR(cursor_.Expect("]"));
  index->args.insert(index->args.begin(), std::move(node));
  return index;
}

// The inside of [...]: an index (kItem) or a slice (kSlice); args[0] is left for the subject.
StatusOr<ExprPtr> ExprParser::ParseSubscribed() {
  const size_t offset = cursor_.Current().offset;
  ExprPtr start;
  if (!cursor_.IsOperator(":")) {
    MP_ASSIGN_OR_RETURN(start, ParseExpression());
    if (!cursor_.IsOperator(":")) {
      auto item = cursor_.MakeExpr(Expr::Kind::kItem, offset);
      item->args.push_back(std::move(start));
      return item;
    }
  }
  cursor_.Advance();  // :
  auto slice = cursor_.MakeExpr(Expr::Kind::kSlice, offset);
  slice->args.push_back(std::move(start));
  ExprPtr stop, step;
  if (!cursor_.IsOperator("]") && !cursor_.IsOperator(",") && !cursor_.IsOperator(":")) {
    MP_ASSIGN_OR_RETURN(stop, ParseExpression());
  }
  if (cursor_.IsOperator(":")) {
    cursor_.Advance();
    if (!cursor_.IsOperator("]") && !cursor_.IsOperator(",")) {
      MP_ASSIGN_OR_RETURN(step, ParseExpression());
    }
  }
  slice->args.push_back(std::move(stop));
  slice->args.push_back(std::move(step));
  return slice;
}

Status ExprParser::ParseCallArgs(Expr* call) {
  MP_RETURN_IF_ERROR(cursor_.Expect("("));
  bool first = true;
  while (!cursor_.IsOperator(")")) {
    if (!first) MP_RETURN_IF_ERROR(cursor_.Expect(","));
    first = false;
    if (cursor_.IsOperator(")")) break;
    if (cursor_.IsOperator("*") || cursor_.IsOperator("**")) {
      return cursor_.FailHere("*args and **kwargs in calls are not supported");
    }
    if (cursor_.Current().kind == TokenKind::kName && cursor_.Peek().kind == TokenKind::kOperator &&
        cursor_.Peek().text == "=") {
      std::string key = cursor_.Current().text;
      cursor_.Advance();
      cursor_.Advance();
      MP_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
      call->keyword.emplace_back(std::move(key), std::move(value));
      continue;
    }
    if (!call->keyword.empty()) {
      return cursor_.FailHere("a positional argument follows a keyword argument");
    }
    MP_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
    call->args.push_back(std::move(value));
  }
  cursor_.Advance();
  return OkStatus();
}

StatusOr<ExprPtr> ExprParser::ParseFilter(ExprPtr node) {
  cursor_.Advance();  // |
  if (cursor_.Current().kind != TokenKind::kName) {
    return cursor_.FailExpected("a filter name after '|'");
  }
  auto filter = cursor_.MakeExpr(Expr::Kind::kFilter, cursor_.Current().offset);
  filter->name = cursor_.Current().text;
  filter->args.push_back(std::move(node));
  cursor_.Advance();
  if (cursor_.IsOperator("(")) MP_RETURN_IF_ERROR(ParseCallArgs(filter.get()));
  return filter;
}

StatusOr<ExprPtr> ExprParser::ParseTest(ExprPtr node) {
  auto test = cursor_.MakeExpr(Expr::Kind::kTest, cursor_.Current().offset);
  cursor_.Advance();  // is
  if (cursor_.IsName("not")) {
    test->negated = true;
    cursor_.Advance();
  }
  if (cursor_.Current().kind != TokenKind::kName) {
    return cursor_.FailExpected("a test name after 'is'");
  }
  test->name = cursor_.Current().text;
  test->args.push_back(std::move(node));
  cursor_.Advance();
  const Token& t = cursor_.Current();
  if (cursor_.IsOperator("(")) {
    MP_RETURN_IF_ERROR(ParseCallArgs(test.get()));
  } else if (cursor_.IsName("is")) {
    return cursor_.Fail(t.offset, "tests cannot be chained with 'is'");
  } else if ((t.kind == TokenKind::kName && t.text != "else" && t.text != "or" &&
              t.text != "and") ||
             t.kind == TokenKind::kString || t.kind == TokenKind::kInteger ||
             t.kind == TokenKind::kFloat || cursor_.IsOperator("[") || cursor_.IsOperator("{")) {
    // One argument without parentheses: `x is divisibleby 3`, `x is equalto y`.
    MP_ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
    MP_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
    test->args.push_back(std::move(arg));
  }
  return test;
}

}  // namespace millipede::jinja::internal
