// The engine's built-in functions, filters, tests and methods, and the argument binding they
// share. Internal to jinja.
#pragma once

#include <initializer_list>
#include <optional>
#include <string_view>
#include <vector>

#include "jinja/runtime.h"
#include "jinja/value.h"

namespace millipede::jinja::internal {

struct Param {
  std::string_view name;
  std::optional<Value> fallback;  // absent: the argument is required
};

// Python's binding of positional then keyword arguments to `params`: too many positional
// arguments, an unknown or repeated keyword or a missing required argument is an error naming
// `function`.
StatusOr<std::vector<Value>> BindArgs(std::string_view function, const CallArgs& args,
                                      std::initializer_list<Param> params);

// range(), namespace() and dict(), or nullopt for other names.
std::optional<Value> GlobalFunction(Runtime& runtime, std::string_view name);

// `item in container`: substring, list member, dict key; false for undefined.
StatusOr<bool> Contains(const Value& container, const Value& item);

// value[start:stop:step] for strings (by code point), lists and tuples.
StatusOr<Value> Slice(Runtime& runtime, const Value& value, std::optional<int64_t> start,
                      std::optional<int64_t> stop, std::optional<int64_t> step);

// The bound method `name` of a string or dict ('x'.strip, d.items), or nullopt.
std::optional<Value> Method(Runtime& runtime, const Value& self, std::string_view name);

}  // namespace millipede::jinja::internal
