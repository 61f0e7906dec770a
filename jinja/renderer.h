// The statement renderer: text and output, if, for (with loop variables), set, break /
// continue and scopes (render.cc); expressions go to its evaluator. Internal to jinja.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "jinja/ast.h"
#include "jinja/evaluator.h"
#include "jinja/runtime.h"
#include "jinja/scopes.h"
#include "jinja/template.h"

namespace millipede::jinja::internal {

class Renderer {
 public:
  // `runtime` and `variables` must outlive the renderer.
  Renderer(Runtime* runtime, const Variables& variables)
      : runtime_(*runtime), scopes_(variables), evaluator_(runtime, &scopes_) {}

  // Renders `body` into `out`.
  Status Run(const Body& body, std::string* out);

 private:
  // What a break or continue leaves for the enclosing loop.
  enum class Flow { kNormal, kBreak, kContinue };

  Status Execute(const Body& body);
  // `body` in a scope of its own.
  Status ExecuteScoped(const Body& body);
  Status ExecuteStatement(const Stmt& s);
  Status ExecuteIf(const Stmt& s);
  Status ExecuteFor(const Stmt& s);
  // The items of a for loop that pass its `if` filter.
  StatusOr<std::vector<Value>> FilterLoopItems(const Stmt& s, std::vector<Value> all);
  Status ExecuteSet(const Stmt& s);
  // Sets `s.attribute` of the namespace named `s.targets[0]`.
  Status SetNamespaceAttribute(const Stmt& s, Value value);
  Status Output(std::string_view text, size_t offset);
  Status Bind(const std::vector<std::string>& targets, const Value& value, size_t offset);

  Status At(size_t offset, const Status& status) const { return runtime_.At(offset, status); }

  Runtime& runtime_;
  Scopes scopes_;
  Evaluator evaluator_;
  std::string* out_ = nullptr;
  Flow flow_ = Flow::kNormal;
};

}  // namespace millipede::jinja::internal
