// The parsed template: expressions and statements, each with the source offset errors point at.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace millipede::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,   // literal
    kName,      // name
    kList,      // args: the items
    kTuple,     // args: the items
    kDict,      // args: key, value, key, value, ...
    kAttr,      // args[0].name
    kItem,      // args[0][args[1]]
    kSlice,     // args[0][args[1]:args[2]:args[3]]; absent bounds are null
    kCall,      // args[0](args[1:], keyword)
    kFilter,    // args[0] | name(args[1:], keyword)
    kTest,      // args[0] is [not] name(args[1:])
    kNot,       // not args[0]
    kNegate,    // -args[0]
    kPlus,      // +args[0]
    kBinary,    // args[0] op args[1]: + - * / // % ** ~
    kCompare,   // args[0] ops[0] args[1] ops[1] args[2] ...: == != < <= > >= in, not in
    kAnd,       // args[0] and args[1]
    kOr,        // args[0] or args[1]
    kCondition  // args[0] if args[1] else args[2] (args[2] null: undefined)
  };

  Kind kind = Kind::kLiteral;
  size_t offset = 0;
  Value literal;
  std::string name;      // kName, kAttr, kFilter, kTest; kBinary: the operator
  bool negated = false;  // kTest: "is not"
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
  std::vector<std::string> ops;  // kCompare
};

struct Stmt;
using Body = std::vector<Stmt>;

struct Stmt {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // branches: (condition, body); the else branch has a null condition
    kFor,       // for targets in expr [if condition] body [else else_body]
    kSet,       // set targets = expr, or set targets[0].attribute = expr
    kSetBlock,  // set targets[0] %}body{% endset
    kBreak,
    kContinue,
    kScope,  // body alone ({% generation %})
  };

  Kind kind = Kind::kText;
  size_t offset = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;
  std::vector<std::string> targets;
  std::string attribute;  // kSet on a namespace attribute
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
};

}  // namespace millipede::jinja
