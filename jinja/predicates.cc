// Tests (`x is defined`, ...), the global functions, and argument binding.
#include <algorithm>

#include "jinja/builtins.h"
#include "jinja/py_text.h"

namespace millipede::jinja::internal {
namespace {

constexpr std::string_view kTests[] = {
    "defined", "undefined", "none",   "boolean", "false",       "true",     "integer",
    "float",   "number",    "string", "mapping", "iterable",    "sequence", "callable",
    "eq",      "equalto",   "==",     "ne",      "!=",          "lt",       "lessthan",
    "<",       "le",        "<=",     "gt",      "greaterthan", ">",        "ge",
    ">=",      "in",        "odd",    "even",    "divisibleby", "lower",    "upper"};

StatusOr<bool> CompareTest(std::string_view name, const Value& a, const Value& b) {
  if (name == "eq" || name == "equalto" || name == "==") return Equals(a, b);
  if (name == "ne" || name == "!=") {
    MP_ASSIGN_OR_RETURN(bool same, Equals(a, b));
    return !same;
  }
  if (a.is_undefined() || b.is_undefined()) {
    return InvalidArgumentError((a.is_undefined() ? a : b).as_string());
  }
  if (name == "lt" || name == "lessthan" || name == "<") return Less(a, b);
  if (name == "gt" || name == "greaterthan" || name == ">") return Less(b, a);
  if (name == "le" || name == "<=") {
    MP_ASSIGN_OR_RETURN(bool greater, Less(b, a));
    return !greater;
  }
  MP_ASSIGN_OR_RETURN(bool less, Less(a, b));  // ge
  return !less;
}

StatusOr<bool> IntegerTest(std::string_view name, const Value& v, const std::vector<Value>& args) {
  if (v.kind() != Value::Kind::kInt && v.kind() != Value::Kind::kBool) {
    return InvalidArgumentError("the '" + std::string(name) + "' test needs an integer, not '" +
                                TypeName(v) + "'");
  }
  if (name == "odd") return v.as_int() % 2 != 0;
  if (name == "even") return v.as_int() % 2 == 0;
  const Value& n = args[0];
  if (n.kind() != Value::Kind::kInt || n.as_int() == 0) {
    return InvalidArgumentError("divisibleby needs a non-zero integer");
  }
  return v.as_int() % n.as_int() == 0;
}

StatusOr<Value> Range(Runtime& runtime, const CallArgs& args) {
  if (!args.keyword.empty() || args.positional.empty() || args.positional.size() > 3) {
    return InvalidArgumentError("range() takes 1 to 3 integer arguments");
  }
  int64_t bounds[3] = {0, 0, 1};
  for (size_t i = 0; i < args.positional.size(); ++i) {
    const Value& v = args.positional[i];
    if (v.kind() != Value::Kind::kInt && v.kind() != Value::Kind::kBool) {
      return InvalidArgumentError(std::string("range() needs integers, not '") + TypeName(v) + "'");
    }
    bounds[args.positional.size() == 1 ? 1 : i] = v.as_int();
  }
  const auto [start, stop, step] = bounds;
  MP_REQUIRE(step != 0, "range() step must not be zero");
  // The count before building anything, so that range(10**18) is refused at once.
  const __int128 span =
      step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
  const __int128 abs_step = step > 0 ? step : -static_cast<__int128>(step);
  const __int128 count = span <= 0 ? 0 : (span + abs_step - 1) / abs_step;
  MP_RETURN_IF_ERROR(
      runtime.CheckListSize(count > INT64_MAX ? INT64_MAX : static_cast<int64_t>(count)));
  std::vector<Value> items;
  for (int64_t k = 0; k < static_cast<int64_t>(count); ++k)
    items.push_back(Value::Int(start + k * step));
  return runtime.MakeList(std::move(items));
}

// namespace(...) and dict(...): keyword arguments, after an optional dict to start from.
StatusOr<DictData> Attributes(const char* name, const CallArgs& args) {
  DictData attrs;
  if (args.positional.size() > 1 ||
      (args.positional.size() == 1 && !args.positional[0].is_dict())) {
    return InvalidArgumentError(std::string(name) +
                                "() takes keyword arguments and an optional dict");
  }
  if (!args.positional.empty()) attrs = args.positional[0].as_dict();
  for (const auto& [key, value] : args.keyword) attrs.Set(key, value);
  return attrs;
}

}  // namespace

StatusOr<std::vector<Value>> BindArgs(std::string_view function, const CallArgs& args,
                                      std::initializer_list<Param> params) {
  const std::string fn(function);
  if (args.positional.size() > params.size()) {
    return InvalidArgumentError(fn + "() takes at most " + std::to_string(params.size()) +
                                " argument(s), got " + std::to_string(args.positional.size()));
  }
  std::vector<std::optional<Value>> bound(params.size());
  for (size_t i = 0; i < args.positional.size(); ++i) bound[i] = args.positional[i];
  for (const auto& [key, value] : args.keyword) {
    auto it =
        std::find_if(params.begin(), params.end(), [&](const Param& p) { return p.name == key; });
    if (it == params.end()) {
      return InvalidArgumentError(fn + "() got an unexpected keyword argument '" + key + "'");
    }
    const size_t i = static_cast<size_t>(it - params.begin());
    if (bound[i]) return InvalidArgumentError(fn + "() got argument '" + key + "' twice");
    bound[i] = value;
  }
  std::vector<Value> out;
  size_t i = 0;
  for (const Param& p : params) {
    if (!bound[i] && !p.fallback) {
      return InvalidArgumentError(fn + "() is missing its argument '" + std::string(p.name) + "'");
    }
    out.push_back(bound[i] ? *bound[i] : *p.fallback);
    ++i;
  }
  return out;
}

std::optional<Value> GlobalFunction(Runtime& runtime, std::string_view name) {
  if (name == "range") {
    return Value::Function("range", [&runtime](CallArgs& args) { return Range(runtime, args); });
  }
  if (name == "namespace" || name == "dict") {
    const bool is_namespace = name == "namespace";
    return Value::Function(std::string(name), [is_namespace](CallArgs& args) -> StatusOr<Value> {
      MP_ASSIGN_OR_RETURN(DictData attrs, Attributes(is_namespace ? "namespace" : "dict", args));
      if (is_namespace) return Value::Object("Namespace", std::move(attrs));
      return Value::Dict(std::move(attrs));
    });
  }
  return std::nullopt;
}

StatusOr<bool> Runtime::ApplyTest(std::string_view name, const Value& v, CallArgs& args) {
  if (std::find(std::begin(kTests), std::end(kTests), name) == std::end(kTests)) {
    return InvalidArgumentError("the test '" + std::string(name) +
                                "' is not supported by this template engine");
  }
  const bool compares = name == "eq" || name == "equalto" || name == "==" || name == "ne" ||
                        name == "!=" || name == "lt" || name == "lessthan" || name == "<" ||
                        name == "le" || name == "<=" || name == "gt" || name == "greaterthan" ||
                        name == ">" || name == "ge" || name == ">=" || name == "in" ||
                        name == "divisibleby";
  MP_ASSIGN_OR_RETURN(std::vector<Value> a,
                      compares ? BindArgs(name, args, {{"other", {}}}) : BindArgs(name, args, {}));
  const Value::Kind k = v.kind();
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return k == Value::Kind::kBool;
  if (name == "true" || name == "false") {
    return k == Value::Kind::kBool && v.as_bool() == (name == "true");
  }
  if (name == "integer") return k == Value::Kind::kInt;
  if (name == "float") return k == Value::Kind::kFloat;
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  // Jinja's Undefined is iterable (empty) and a sequence (of length 0).
  if (name == "iterable" || name == "sequence") {
    return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
  }
  if (name == "callable") return k == Value::Kind::kFunction;
  if (name == "in") return Contains(a[0], v);
  if (name == "odd" || name == "even" || name == "divisibleby") return IntegerTest(name, v, a);
  if (name == "lower" || name == "upper") {
    MP_ASSIGN_OR_RETURN(std::string text, ToStr(v));
    MP_ASSIGN_OR_RETURN(std::string lower, PyCase(text, CaseMap::kLower));
    MP_ASSIGN_OR_RETURN(std::string upper, PyCase(text, CaseMap::kUpper));
    // str.islower(): some cased letter and no uppercase one (and the reverse).
    return name == "lower" ? (text == lower && text != upper) : (text == upper && text != lower);
  }
  return CompareTest(name, v, a[0]);
}

}  // namespace millipede::jinja::internal
