// The template interpreter: statements (render.cc) and expressions (eval.cc) over scoped
// variables, with the work budget every step draws from. Internal to jinja.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "jinja/ast.h"
#include "jinja/template.h"
#include "jinja/value.h"

namespace millipede::jinja::internal {

class Interpreter {
 public:
  Interpreter(std::string_view source, const Variables& variables, const RenderLimits& limits)
      : source_(source), variables_(variables), limits_(limits) {}

  // Renders `body` into `out`.
  Status Run(const Body& body, std::string* out);

  StatusOr<Value> Eval(const Expr& e);

  const RenderLimits& limits() const { return limits_; }
  // The budget: `steps` more steps, or ResourceExhausted.
  Status Charge(int64_t steps);
  // A string built by a filter or operator: charged by size and bounded by max_output_bytes.
  StatusOr<Value> MakeString(std::string text);
  // A list built on the way: bounded by max_list_items.
  StatusOr<Value> MakeList(std::vector<Value> items, bool is_tuple = false);
  Status CheckListSize(int64_t items) const;

  // Filters and tests by name, for the filters that take a test or filter name (select, map).
  StatusOr<Value> ApplyFilter(std::string_view name, const Value& subject, CallArgs& args);
  StatusOr<bool> ApplyTest(std::string_view name, const Value& subject, CallArgs& args);

  // value.name and value[key] as Jinja resolves them (attribute, then item, or the reverse).
  StatusOr<Value> GetAttribute(const Value& value, std::string_view name);
  StatusOr<Value> GetItem(const Value& value, const Value& key);
  // The items a for loop or filter iterates over: list items, dict keys, string characters;
  // nothing for undefined.
  StatusOr<std::vector<Value>> Iterate(const Value& value);

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Status Execute(const Body& body);
  Status ExecuteStatement(const Stmt& s);
  Status ExecuteFor(const Stmt& s);
  Status ExecuteSet(const Stmt& s);
  Status Output(std::string_view text, size_t offset);
  Status Bind(const std::vector<std::string>& targets, const Value& value, size_t offset);

  StatusOr<Value> EvalNode(const Expr& e);
  StatusOr<Value> EvalCall(const Expr& e);
  StatusOr<Value> EvalBinary(const Expr& e);
  StatusOr<Value> EvalCompare(const Expr& e);
  StatusOr<Value> EvalSlice(const Expr& e);
  StatusOr<Value> EvalContainer(const Expr& e);
  StatusOr<Value> Lookup(const std::string& name);

  // Prefixes an error that carries no position yet with the position of `offset`.
  Status At(size_t offset, const Status& status) const;

  std::string_view source_;
  const Variables& variables_;
  const RenderLimits& limits_;
  int64_t steps_ = 0;
  std::string* out_ = nullptr;
  // A scope's variables: few, so a vector searched from the back.
  struct Frame {
    std::vector<std::pair<std::string, Value>> vars;
    const Value* Find(std::string_view name) const {
      for (auto it = vars.rbegin(); it != vars.rend(); ++it) {
        if (it->first == name) return &it->second;
      }
      return nullptr;
    }
    void Set(const std::string& name, Value value) {
      for (auto& [key, v] : vars) {
        if (key == name) {
          v = std::move(value);
          return;
        }
      }
      vars.emplace_back(name, std::move(value));
    }
  };
  // Innermost last: the template's own scope, then one per loop round or block.
  std::vector<Frame> frames_;
  Flow flow_ = Flow::kNormal;
};

}  // namespace millipede::jinja::internal
