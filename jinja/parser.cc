// Statements: text, {{ }}, if / elif / else, for (with a filter and else), set (values,
// namespace attributes, blocks), break / continue, generation.
#include "jinja/parser.h"

#include <algorithm>

#include "jinja/parser_impl.h"

namespace millipede::jinja {
namespace internal {
namespace {

// Tags Jinja has that this engine does not implement: named so that the error says so rather
// than "unknown tag".
constexpr std::string_view kUnsupportedTags[] = {
    "macro", "call", "filter", "block", "extends",    "include", "import",
    "from",  "with", "raw",    "do",    "autoescape", "trans",   "pluralize"};

}  // namespace

Status Parser::Fail(size_t offset, const std::string& what) const {
  return InvalidArgumentError(DescribePosition(source_, offset) + ": " + what);
}

std::string Parser::Describe(const Token& token) const {
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

ExprPtr Parser::MakeExpr(Expr::Kind kind, size_t offset) const {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->offset = offset;
  return e;
}

Status Parser::Expect(std::string_view op) {
  if (!IsOperator(op)) {
    return Fail(Current().offset,
                "expected '" + std::string(op) + "', found " + Describe(Current()));
  }
  Advance();
  return OkStatus();
}

Status Parser::ExpectBlockEnd() {
  if (Current().kind != TokenKind::kBlockEnd) {
    return Fail(Current().offset, "expected '%}', found " + Describe(Current()));
  }
  Advance();
  return OkStatus();
}

StatusOr<Body> Parser::ParseTemplate() {
  std::string end;
  Token start;
  return ParseBody({}, &end, start);
}

StatusOr<Body> Parser::ParseBody(std::initializer_list<std::string_view> end_names,
                                 std::string* end, const Token& opener) {
  Level level(&depth_);
  if (level.TooDeep()) return Fail(opener.offset, "blocks nest too deeply");
  Body body;
  while (true) {
    const Token& t = Current();
    switch (t.kind) {
      case TokenKind::kEnd:
        if (end_names.size() == 0) return body;
        return Fail(opener.offset, "'" + opener.text + "' is not closed: expected {% " +
                                       std::string(*(end_names.end() - 1)) + " %}");
      case TokenKind::kText: {
        Stmt s;
        s.kind = Stmt::Kind::kText;
        s.offset = t.offset;
        s.text = t.text;
        body.push_back(std::move(s));
        Advance();
        break;
      }
      case TokenKind::kVariableBegin: {
        Stmt s;
        s.kind = Stmt::Kind::kOutput;
        s.offset = t.offset;
        Advance();
        MP_ASSIGN_OR_RETURN(s.expr, ParseTuple(/*with_condition=*/true, false));
        if (Current().kind != TokenKind::kVariableEnd) {
          return Fail(Current().offset, "expected '}}', found " + Describe(Current()));
        }
        Advance();
        body.push_back(std::move(s));
        break;
      }
      case TokenKind::kBlockBegin: {
        const Token& name = Peek();
        if (name.kind == TokenKind::kName &&
            std::find(end_names.begin(), end_names.end(), name.text) != end_names.end()) {
          *end = name.text;
          Advance();
          Advance();
          return body;
        }
        Advance();
        MP_RETURN_IF_ERROR(ParseStatement(&body));
        break;
      }
      default:
        return Fail(t.offset, "unexpected " + Describe(t));
    }
  }
}

Status Parser::ParseStatement(Body* body) {
  const Token& name = Current();
  if (name.kind != TokenKind::kName) {
    return Fail(name.offset, "expected a tag name after '{%', found " + Describe(name));
  }
  Stmt s;
  s.offset = name.offset;
  const std::string tag = name.text;
  if (tag == "if") {
    MP_RETURN_IF_ERROR(ParseIf(&s));
  } else if (tag == "for") {
    MP_RETURN_IF_ERROR(ParseFor(&s));
  } else if (tag == "set") {
    MP_RETURN_IF_ERROR(ParseSet(&s));
  } else if (tag == "break" || tag == "continue") {
    if (loop_depth_ == 0) return Fail(name.offset, "'" + tag + "' outside a for loop");
    s.kind = tag == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
    Advance();
    MP_RETURN_IF_ERROR(ExpectBlockEnd());
  } else if (tag == "generation") {
    s.kind = Stmt::Kind::kScope;
    const Token opener = name;
    Advance();
    MP_RETURN_IF_ERROR(ExpectBlockEnd());
    std::string end;
    MP_ASSIGN_OR_RETURN(s.body, ParseBody({"endgeneration"}, &end, opener));
    MP_RETURN_IF_ERROR(ExpectBlockEnd());
  } else if (std::find(std::begin(kUnsupportedTags), std::end(kUnsupportedTags), tag) !=
             std::end(kUnsupportedTags)) {
    return Fail(name.offset, "the {% " + tag + " %} tag is not supported by this template engine");
  } else {
    return Fail(name.offset, "unknown or misplaced tag '" + tag + "'");
  }
  body->push_back(std::move(s));
  return OkStatus();
}

Status Parser::ParseIf(Stmt* stmt) {
  stmt->kind = Stmt::Kind::kIf;
  const Token opener = Current();
  Advance();
  while (true) {
    MP_ASSIGN_OR_RETURN(ExprPtr condition, ParseTuple(/*with_condition=*/false, false));
    MP_RETURN_IF_ERROR(ExpectBlockEnd());
    std::string end;
    MP_ASSIGN_OR_RETURN(Body body, ParseBody({"elif", "else", "endif"}, &end, opener));
    stmt->branches.emplace_back(std::move(condition), std::move(body));
    if (end == "elif") continue;
    MP_RETURN_IF_ERROR(ExpectBlockEnd());
    if (end == "endif") return OkStatus();
    MP_ASSIGN_OR_RETURN(Body else_body, ParseBody({"endif"}, &end, opener));
    stmt->branches.emplace_back(nullptr, std::move(else_body));
    return ExpectBlockEnd();
  }
}

// `a` or `a, b` or `(a, b)`: the names a for loop or set assigns, up to `end_name` or '='.
StatusOr<std::vector<std::string>> Parser::ParseTargetNames(std::string_view end_name) {
  std::vector<std::string> names;
  const bool parenthesized = IsOperator("(");
  if (parenthesized) Advance();
  while (true) {
    if (Current().kind != TokenKind::kName) {
      return Fail(Current().offset, "expected a variable name, found " + Describe(Current()));
    }
    names.push_back(Current().text);
    Advance();
    if (!IsOperator(",")) break;
    Advance();
    if ((parenthesized && IsOperator(")")) || IsName(end_name) || IsOperator("=")) break;
  }
  if (parenthesized) MP_RETURN_IF_ERROR(Expect(")"));
  return names;
}

Status Parser::ParseFor(Stmt* stmt) {
  stmt->kind = Stmt::Kind::kFor;
  const Token opener = Current();
  Advance();
  MP_ASSIGN_OR_RETURN(stmt->targets, ParseTargetNames("in"));
  if (!IsName("in")) return Fail(Current().offset, "expected 'in', found " + Describe(Current()));
  Advance();
  MP_ASSIGN_OR_RETURN(stmt->expr, ParseTuple(/*with_condition=*/false, false, {"recursive"}));
  if (IsName("if")) {
    Advance();
    MP_ASSIGN_OR_RETURN(stmt->condition, ParseExpression());
  }
  if (IsName("recursive")) {
    return Fail(Current().offset, "recursive for loops are not supported by this template engine");
  }
  MP_RETURN_IF_ERROR(ExpectBlockEnd());
  std::string end;
  ++loop_depth_;
  StatusOr<Body> body = ParseBody({"else", "endfor"}, &end, opener);
  --loop_depth_;
  if (!body.ok()) return body.status();
  stmt->body = std::move(body).value();
  MP_RETURN_IF_ERROR(ExpectBlockEnd());
  if (end == "else") {
    MP_ASSIGN_OR_RETURN(stmt->else_body, ParseBody({"endfor"}, &end, opener));
    MP_RETURN_IF_ERROR(ExpectBlockEnd());
  }
  return OkStatus();
}

Status Parser::ParseSet(Stmt* stmt) {
  const Token opener = Current();
  Advance();
  if (Current().kind == TokenKind::kName && Peek().kind == TokenKind::kOperator &&
      Peek().text == "." && Peek(2).kind == TokenKind::kName) {
    stmt->targets = {Current().text};
    stmt->attribute = Peek(2).text;
    Advance();
    Advance();
    Advance();
  } else {
    MP_ASSIGN_OR_RETURN(stmt->targets, ParseTargetNames(""));
  }
  if (IsOperator("=")) {
    Advance();
    stmt->kind = Stmt::Kind::kSet;
    MP_ASSIGN_OR_RETURN(stmt->expr, ParseTuple(/*with_condition=*/true, false));
    return ExpectBlockEnd();
  }
  if (!stmt->attribute.empty() || stmt->targets.size() != 1) {
    return Fail(Current().offset, "expected '=', found " + Describe(Current()));
  }
  if (Current().kind != TokenKind::kBlockEnd) {
    return Fail(Current().offset, "expected '=' or '%}', found " + Describe(Current()) +
                                      " (filtered {% set %} blocks are not supported)");
  }
  Advance();
  stmt->kind = Stmt::Kind::kSetBlock;
  std::string end;
  MP_ASSIGN_OR_RETURN(stmt->body, ParseBody({"endset"}, &end, opener));
  return ExpectBlockEnd();
}

}  // namespace internal

StatusOr<Body> Parse(std::string_view source, const std::vector<Token>& tokens) {
  internal::Parser parser(source, tokens);
  return parser.ParseTemplate();
}

}  // namespace millipede::jinja
