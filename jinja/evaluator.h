// The expression evaluator: names, literals, containers, access, calls, filters, tests and
// operators (eval.cc), over the runtime's budget and the scopes' variables. Internal to jinja.
#pragma once

#include <string>

#include "common/status.h"
#include "jinja/ast.h"
#include "jinja/runtime.h"
#include "jinja/scopes.h"
#include "jinja/value.h"

namespace millipede::jinja::internal {

class Evaluator {
 public:
  // `runtime` and `scopes` must outlive the evaluator; the scopes are read, never changed.
  Evaluator(Runtime* runtime, const Scopes* scopes) : runtime_(*runtime), scopes_(*scopes) {}

  // The value of `e`. Errors carry the position of the expression that failed; values nesting
  // deeper than kMaxValueDepth are an error.
  StatusOr<Value> Eval(const Expr& e);
  // A name as a template sees it: a scope's variable, the caller's, a global function (range,
  // namespace, dict); else an undefined value naming it.
  StatusOr<Value> Lookup(const std::string& name);

 private:
  StatusOr<Value> EvalNode(const Expr& e);
  // x.name and x[key].
  StatusOr<Value> EvalAccess(const Expr& e);
  // -x and +x.
  StatusOr<Value> EvalUnary(const Expr& e);
  StatusOr<Value> EvalCall(const Expr& e);
  StatusOr<Value> EvalBinary(const Expr& e);
  StatusOr<Value> EvalCompare(const Expr& e);
  StatusOr<Value> EvalSlice(const Expr& e);
  StatusOr<Value> EvalContainer(const Expr& e);

  Status At(size_t offset, const Status& status) const { return runtime_.At(offset, status); }

  Runtime& runtime_;
  const Scopes& scopes_;
};

}  // namespace millipede::jinja::internal
