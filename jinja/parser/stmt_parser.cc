// Statements: text, {{ }}, if / elif / else, for (with a filter and else), set (values,
// namespace attributes, blocks), break / continue, generation.
#include "jinja/parser/stmt_parser.h"

#include <algorithm>

#include "jinja/parser.h"

namespace millipede::jinja {
namespace internal {
namespace {

// Tags Jinja has that this engine does not implement: named so that the error says so rather
// than "unknown tag".
constexpr std::string_view kUnsupportedTags[] = {
    "macro", "call", "filter", "block", "extends",    "include", "import",
    "from",  "with", "raw",    "do",    "autoescape", "trans",   "pluralize"};

}  // namespace

StatusOr<Body> StmtParser::ParseTemplate() {
  std::string end;
  Token start;
  return ParseBody({}, &end, start);
}

StatusOr<Body> StmtParser::ParseBody(std::initializer_list<std::string_view> end_names,
                                     std::string* end, const Token& opener) {
  TokenCursor::Level level(&cursor_);
  if (level.TooDeep()) return cursor_.Fail(opener.offset, "blocks nest too deeply");
  Body body;
  while (true) {
    const Token& t = cursor_.Current();
    switch (t.kind) {
      case TokenKind::kEnd:
        if (end_names.size() == 0) return body;
        return cursor_.Fail(opener.offset, "'" + opener.text + "' is not closed: expected {% " +
                                               std::string(*(end_names.end() - 1)) + " %}");
      case TokenKind::kText: {
        Stmt s;
        s.kind = Stmt::Kind::kText;
        s.offset = t.offset;
        s.text = t.text;
        body.push_back(std::move(s));
        cursor_.Advance();
        break;
      }
      case TokenKind::kVariableBegin:
        MP_RETURN_IF_ERROR(ParseOutput(&body));
        break;
      case TokenKind::kBlockBegin: {
        const Token& name = cursor_.Peek();
        if (name.kind == TokenKind::kName &&
            std::find(end_names.begin(), end_names.end(), name.text) != end_names.end()) {
          *end = name.text;
          cursor_.Advance();
          cursor_.Advance();
          return body;
        }
        cursor_.Advance();
        MP_RETURN_IF_ERROR(ParseStatement(&body));
        break;
      }
      default:
        return cursor_.Fail(t.offset, "unexpected " + cursor_.Describe(t));
    }
  }
}

Status StmtParser::ParseOutput(Body* body) {
  Stmt s;
  s.kind = Stmt::Kind::kOutput;
  s.offset = cursor_.Current().offset;
  cursor_.Advance();
  MP_ASSIGN_OR_RETURN(s.expr, expr_.ParseTuple(/*with_condition=*/true, false));
  if (cursor_.Current().kind != TokenKind::kVariableEnd) return cursor_.FailExpected("'}}'");
  cursor_.Advance();
  body->push_back(std::move(s));
  return OkStatus();
}

Status StmtParser::ParseStatement(Body* body) {
  const Token& name = cursor_.Current();
  if (name.kind != TokenKind::kName) {
    return cursor_.Fail(name.offset,
                        "expected a tag name after '{%', found " + cursor_.Describe(name));
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
    if (loop_depth_ == 0) return cursor_.Fail(name.offset, "'" + tag + "' outside a for loop");
    s.kind = tag == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
    cursor_.Advance();
    MP_RETURN_IF_ERROR(cursor_.ExpectBlockEnd());
  } else if (tag == "generation") {
    s.kind = Stmt::Kind::kScope;
    const Token opener = name;
    cursor_.Advance();
    MP_RETURN_IF_ERROR(cursor_.ExpectBlockEnd());
    std::string end;
    MP_ASSIGN_OR_RETURN(s.body, ParseBody({"endgeneration"}, &end, opener));
    MP_RETURN_IF_ERROR(cursor_.ExpectBlockEnd());
  } else if (std::find(std::begin(kUnsupportedTags), std::end(kUnsupportedTags), tag) !=
             std::end(kUnsupportedTags)) {
    return cursor_.Fail(name.offset,
                        "the {% " + tag + " %} tag is not supported by this template engine");
  } else {
    return cursor_.Fail(name.offset, "unknown or misplaced tag '" + tag + "'");
  }
  body->push_back(std::move(s));
  return OkStatus();
}

Status StmtParser::ParseIf(Stmt* stmt) {
  stmt->kind = Stmt::Kind::kIf;
  const Token opener = cursor_.Current();
  cursor_.Advance();
  while (true) {
    MP_ASSIGN_OR_RETURN(ExprPtr condition, expr_.ParseTuple(/*with_condition=*/false, false));
    MP_RETURN_IF_ERROR(cursor_.ExpectBlockEnd());
    std::string end;
    MP_ASSIGN_OR_RETURN(Body body, ParseBody({"elif", "else", "endif"}, &end, opener));
    stmt->branches.emplace_back(std::move(condition), std::move(body));
    if (end == "elif") continue;
    MP_RETURN_IF_ERROR(cursor_.ExpectBlockEnd());
    if (end == "endif") return OkStatus();
    MP_ASSIGN_OR_RETURN(Body else_body, ParseBody({"endif"}, &end, opener));
    stmt->branches.emplace_back(nullptr, std::move(else_body));
    return cursor_.ExpectBlockEnd();
  }
}

// `a` or `a, b` or `(a, b)`: the names a for loop or set assigns, up to `end_name` or '='.
StatusOr<std::vector<std::string>> StmtParser::ParseTargetNames(std::string_view end_name) {
  std::vector<std::string> names;
  const bool parenthesized = cursor_.IsOperator("(");
  if (parenthesized) cursor_.Advance();
  while (true) {
    if (cursor_.Current().kind != TokenKind::kName) return cursor_.FailExpected("a variable name");
    names.push_back(cursor_.Current().text);
    cursor_.Advance();
    if (!cursor_.IsOperator(",")) break;
    cursor_.Advance();
    if ((parenthesized && cursor_.IsOperator(")")) || cursor_.IsName(end_name) ||
        cursor_.IsOperator("="))
      break;
  }
  if (parenthesized) MP_RETURN_IF_ERROR(cursor_.Expect(")"));
  return names;
}

Status StmtParser::ParseFor(Stmt* stmt) {
  stmt->kind = Stmt::Kind::kFor;
  const Token opener = cursor_.Current();
  cursor_.Advance();
  MP_ASSIGN_OR_RETURN(stmt->targets, ParseTargetNames("in"));
  if (!cursor_.IsName("in")) return cursor_.FailExpected("'in'");
  cursor_.Advance();
  MP_ASSIGN_OR_RETURN(stmt->expr, expr_.ParseTuple(/*with_condition=*/false, false, {"recursive"}));
  if (cursor_.IsName("if")) {
    cursor_.Advance();
    MP_ASSIGN_OR_RETURN(stmt->condition, expr_.ParseExpression());
  }
  if (cursor_.IsName("recursive")) {
    return cursor_.FailHere("recursive for loops are not supported by this template engine");
  }
  MP_RETURN_IF_ERROR(cursor_.ExpectBlockEnd());
  std::string end;
  ++loop_depth_;
  StatusOr<Body> body = ParseBody({"else", "endfor"}, &end, opener);
  --loop_depth_;
  if (!body.ok()) return body.status();
  stmt->body = std::move(body).value();
  MP_RETURN_IF_ERROR(cursor_.ExpectBlockEnd());
  if (end == "else") {
    MP_ASSIGN_OR_RETURN(stmt->else_body, ParseBody({"endfor"}, &end, opener));
    MP_RETURN_IF_ERROR(cursor_.ExpectBlockEnd());
  }
  return OkStatus();
}

Status StmtParser::ParseSet(Stmt* stmt) {
  const Token opener = cursor_.Current();
  cursor_.Advance();
  if (cursor_.Current().kind == TokenKind::kName && cursor_.Peek().kind == TokenKind::kOperator &&
      cursor_.Peek().text == "." && cursor_.Peek(2).kind == TokenKind::kName) {
    stmt->targets = {cursor_.Current().text};
    stmt->attribute = cursor_.Peek(2).text;
    cursor_.Advance();
    cursor_.Advance();
    cursor_.Advance();
  } else {
    MP_ASSIGN_OR_RETURN(stmt->targets, ParseTargetNames(""));
  }
  if (cursor_.IsOperator("=")) {
    cursor_.Advance();
    stmt->kind = Stmt::Kind::kSet;
    MP_ASSIGN_OR_RETURN(stmt->expr, expr_.ParseTuple(/*with_condition=*/true, false));
    return cursor_.ExpectBlockEnd();
  }
  if (!stmt->attribute.empty() || stmt->targets.size() != 1) return cursor_.FailExpected("'='");
  if (cursor_.Current().kind != TokenKind::kBlockEnd) {
    return cursor_.FailHere("expected '=' or '%}', found " + cursor_.Describe(cursor_.Current()) +
                            " (filtered {% set %} blocks are not supported)");
  }
  cursor_.Advance();
  stmt->kind = Stmt::Kind::kSetBlock;
  std::string end;
  MP_ASSIGN_OR_RETURN(stmt->body, ParseBody({"endset"}, &end, opener));
  return cursor_.ExpectBlockEnd();
}

}  // namespace internal

StatusOr<Body> Parse(std::string_view source, const std::vector<Token>& tokens) {
  internal::StmtParser parser(source, tokens);
  return parser.ParseTemplate();
}

}  // namespace millipede::jinja
