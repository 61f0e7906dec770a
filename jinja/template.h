// A Jinja template engine for the subset that model chat templates use.
//
// Supported: text, {{ expressions }}, {# comments #}, whitespace control ({%- -%} {{- -}} and the
// + forms; trim_blocks / lstrip_blocks as options); {% if / elif / else %}, {% for %} (tuple
// targets, an `if` filter, {% else %}, loop.index / index0 / revindex / revindex0 / first / last /
// length / previtem / nextitem, {% break %} / {% continue %}), {% set %} (names, tuples, namespace
// attributes, {% set x %}...{% endset %}), {% generation %}; literals (strings with Python escapes,
// ints, floats, true / false / none, lists, tuples, dicts); . and [] access, slices, calls with
// keyword arguments; + - * / // % ** ~, comparisons (chained), in / not in, and / or / not,
// a if b else c; the filters and tests listed in builtins.cc and the str / dict methods listed
// there; the globals range(), namespace() and dict(). Values behave as Python's do in Jinja:
// undefined names print as "" and fail when used, None prints "None", strings are sequences of
// code points, dicts keep insertion order.
//
// Anything else (macros, includes, other filters, ...) is an error naming the construct and its
// line and column, when the template is parsed or, for names only known at run time (filters,
// tests, methods), when it is rendered. Rendering is bounded (RenderLimits): a hostile template
// ends with an error, never a hang or a crash.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "jinja/value.h"

namespace millipede::jinja {

struct TemplateOptions {
  bool trim_blocks = false;    // drop the first newline after a block or comment tag
  bool lstrip_blocks = false;  // drop spaces and tabs before a block or comment tag on its line
};

struct RenderLimits {
  // Evaluation steps: one per expression, statement and loop round, plus one per 64 bytes of
  // text built.
  int64_t max_steps = 20'000'000;
  // The rendered text, and any one string built on the way.
  int64_t max_output_bytes = 64ll << 20;
  // Items of any one list built on the way (range(), [x] * n, ...).
  int64_t max_list_items = 1 << 20;
};

// The variables a template sees, by name (callables are Value::Function).
using Variables = std::map<std::string, Value, std::less<>>;

struct Program;

class Template {
 public:
  // Parses `source`. InvalidArgument with "line L, column C: ..." for a syntax error or a
  // construct outside the subset.
  static StatusOr<Template> Parse(std::string_view source, const TemplateOptions& options = {});

  // Renders with `variables`. InvalidArgument with "line L, column C: ..." for errors at run time
  // (an undefined value used, a type error, an unsupported filter, an error a function raised);
  // ResourceExhausted when a limit is reached.
  StatusOr<std::string> Render(const Variables& variables, const RenderLimits& limits = {}) const;

 private:
  explicit Template(std::shared_ptr<const Program> program) : program_(std::move(program)) {}
  std::shared_ptr<const Program> program_;
};

}  // namespace millipede::jinja
