// The variables a template sees while it renders: its scopes, innermost last (the template's
// own, then one per loop round or block), over the variables the caller passed. Internal to
// jinja.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jinja/template.h"
#include "jinja/value.h"

namespace millipede::jinja::internal {

class Scopes {
 public:
  // `variables` must outlive the scopes.
  explicit Scopes(const Variables& variables) : variables_(variables) {}

  // Opens and closes the innermost scope.
  void Push() { frames_.emplace_back(); }
  void Pop() { frames_.pop_back(); }
  // Empties the innermost scope (a loop's next round).
  void ClearInnermost() { frames_.back().vars.clear(); }
  // Binds `name` in the innermost scope (there must be one).
  void Set(const std::string& name, Value value) { frames_.back().Set(name, std::move(value)); }

  // The innermost binding of `name`, else the caller's variable of that name; null for neither.
  const Value* Find(std::string_view name) const {
    for (auto frame = frames_.rbegin(); frame != frames_.rend(); ++frame) {
      if (const Value* v = frame->Find(name)) return v;
    }
    auto it = variables_.find(name);
    return it != variables_.end() ? &it->second : nullptr;
  }

 private:
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

  const Variables& variables_;
  std::vector<Frame> frames_;
};

}  // namespace millipede::jinja::internal
