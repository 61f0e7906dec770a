// The int, float, abs and tojson filters.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "jinja/builtins.h"
#include "jinja/py_text.h"

namespace millipede::jinja::internal {
namespace {

// Python's int(text, base) and float(text) over a string: surrounding whitespace, a sign, and
// underscores between digits are allowed.
std::optional<int64_t> ParseInt(const std::string& raw, int base) {
  std::string text = PyStrip(raw, std::nullopt, StripSide::kBoth);
  std::string digits;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '_' && i > 0 && i + 1 < text.size() &&
        std::isalnum(static_cast<unsigned char>(text[i - 1])) &&
        std::isalnum(static_cast<unsigned char>(text[i + 1]))) {
      continue;
    }
    digits.push_back(text[i]);
  }
  if (digits.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(digits.c_str(), &end, base);
  if (errno != 0 || *end != '\0' || std::isspace(static_cast<unsigned char>(digits[0]))) {
    return std::nullopt;
  }
  return v;
}

std::optional<double> ParseFloat(const std::string& raw) {
  std::string text = PyStrip(raw, std::nullopt, StripSide::kBoth);
  if (text.empty() || text.find_first_of("xXpP") != std::string::npos) return std::nullopt;
  std::string clean;
  for (char c : text) {
    if (c != '_') clean.push_back(c);
  }
  char* end = nullptr;
  const double v = std::strtod(clean.c_str(), &end);
  if (*end != '\0') return std::nullopt;
  return v;
}

// int(f) for a finite or infinite f (callers handle NaN).
StatusOr<Value> FloatToInt(double f) {
  if (std::isinf(f)) return InvalidArgumentError("cannot convert float infinity to integer");
  const double t = std::trunc(f);
  if (t < -9.2233720368547758e18 || t >= 9.2233720368547758e18) {
    return InvalidArgumentError("the integer is too large for this template engine");
  }
  return Value::Int(static_cast<int64_t>(t));
}

StatusOr<Value> Int(const Value& v, const Value& fallback, int base) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return InvalidArgumentError(v.as_string());
    case Value::Kind::kBool:
    case Value::Kind::kInt:
      return Value::Int(v.as_int());
    case Value::Kind::kFloat:
      if (std::isnan(v.as_float()))
        return InvalidArgumentError("cannot convert float NaN to integer");
      return FloatToInt(v.as_float());
    case Value::Kind::kString: {
      if (std::optional<int64_t> i = ParseInt(v.as_string(), base)) return Value::Int(*i);
      std::optional<double> f = ParseFloat(v.as_string());
      if (!f || std::isnan(*f)) return fallback;
      return FloatToInt(*f);
    }
    default:
      return fallback;
  }
}

StatusOr<Value> Float(const Value& v, const Value& fallback) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return InvalidArgumentError(v.as_string());
    case Value::Kind::kBool:
    case Value::Kind::kInt:
    case Value::Kind::kFloat:
      return Value::Float(v.as_float());
    case Value::Kind::kString: {
      std::optional<double> f = ParseFloat(v.as_string());
      return f ? Value::Float(*f) : fallback;
    }
    default:
      return fallback;
  }
}

}  // namespace

StatusOr<Value> NumberFilter(Runtime&, std::string_view name, const Value& v, CallArgs& args) {
  if (name == "int") {
    MP_ASSIGN_OR_RETURN(
        auto a, BindArgs("int", args, {{"default", Value::Int(0)}, {"base", Value::Int(10)}}));
    if (a[1].kind() != Value::Kind::kInt || a[1].as_int() < 2 || a[1].as_int() > 36) {
      return InvalidArgumentError("int(): base must be an integer in [2, 36]");
    }
    return Int(v, a[0], static_cast<int>(a[1].as_int()));
  }
  if (name == "float") {
    MP_ASSIGN_OR_RETURN(auto a, BindArgs("float", args, {{"default", Value::Float(0)}}));
    return Float(v, a[0]);
  }
  MP_RETURN_IF_ERROR(BindArgs("abs", args, {}).status());
  if (v.kind() == Value::Kind::kFloat) return Value::Float(std::fabs(v.as_float()));
  if (v.kind() == Value::Kind::kInt || v.kind() == Value::Kind::kBool) {
    if (v.as_int() == INT64_MIN) return InvalidArgumentError("abs(): integer is too large");
    return Value::Int(v.as_int() < 0 ? -v.as_int() : v.as_int());
  }
  return InvalidArgumentError(std::string("bad operand type for abs(): '") + TypeName(v) + "'");
}

// transformers' tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None,
// sort_keys=False).
StatusOr<Value> ToJsonFilter(Runtime& runtime, const Value& v, CallArgs& args) {
  MP_ASSIGN_OR_RETURN(auto a, BindArgs("tojson", args,
                                       {{"ensure_ascii", Value::Bool(false)},
                                        {"indent", Value::None()},
                                        {"separators", Value::None()},
                                        {"sort_keys", Value::Bool(false)}}));
  DumpOptions options;
  options.ensure_ascii = Truthy(a[0]);
  options.sort_keys = Truthy(a[3]);
  const Value& indent = a[1];
  if (indent.kind() == Value::Kind::kInt) {
    const int64_t width = std::clamp<int64_t>(indent.as_int(), 0, 1024);
    options.indent = std::string(static_cast<size_t>(width), ' ');
  } else if (indent.is_string()) {
    options.indent = indent.as_string();
  } else if (!indent.is_none()) {
    return InvalidArgumentError("tojson(): indent must be an integer, a string or None");
  }
  if (options.indent) options.item_separator = ",";
  const Value& separators = a[2];
  if (!separators.is_none()) {
    if (!separators.is_list() || separators.as_list().items.size() != 2 ||
        !separators.as_list().items[0].is_string() || !separators.as_list().items[1].is_string()) {
      return InvalidArgumentError("tojson(): separators must be a pair of strings");
    }
    options.item_separator = separators.as_list().items[0].as_string();
    options.key_separator = separators.as_list().items[1].as_string();
  }
  options.max_bytes = static_cast<size_t>(runtime.limits().max_output_bytes);
  MP_ASSIGN_OR_RETURN(std::string text, DumpJson(v, options));
  return runtime.MakeString(std::move(text));
}

}  // namespace millipede::jinja::internal
