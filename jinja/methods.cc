// Methods of str (strip, lstrip, rstrip, split, startswith, endswith, upper, lower, title,
// capitalize, replace, join) and dict (items, keys, values, get), bound to their object.
#include "jinja/builtins.h"
#include "jinja/py_text.h"

namespace millipede::jinja::internal {
namespace {

StatusOr<std::optional<std::string>> OptionalString(const Value& v, std::string_view what) {
  if (v.is_none()) return std::optional<std::string>();
  if (!v.is_string()) {
    return InvalidArgumentError(std::string(what) + " must be a string or None, not '" +
                                TypeName(v) + "'");
  }
  return std::optional<std::string>(v.as_string());
}

StatusOr<int64_t> Integer(const Value& v, std::string_view what) {
  if (v.kind() != Value::Kind::kInt && v.kind() != Value::Kind::kBool) {
    return InvalidArgumentError(std::string(what) + " must be an integer, not '" + TypeName(v) +
                                "'");
  }
  return v.as_int();
}

StatusOr<Value> Strip(Runtime& runtime, const Value& self, const CallArgs& args, const char* name,
                      StripSide side) {
  MP_ASSIGN_OR_RETURN(auto bound, BindArgs(name, args, {{"chars", Value::None()}}));
  MP_ASSIGN_OR_RETURN(auto chars, OptionalString(bound[0], "chars"));
  MP_RETURN_IF_ERROR(runtime.Charge(static_cast<int64_t>(self.as_string().size() / 64)));
  return Value::String(PyStrip(self.as_string(), chars, side));
}

StatusOr<Value> Split(Runtime& runtime, const Value& self, const CallArgs& args) {
  MP_ASSIGN_OR_RETURN(
      auto bound, BindArgs("split", args, {{"sep", Value::None()}, {"maxsplit", Value::Int(-1)}}));
  MP_ASSIGN_OR_RETURN(auto sep, OptionalString(bound[0], "sep"));
  MP_ASSIGN_OR_RETURN(int64_t maxsplit, Integer(bound[1], "maxsplit"));
  MP_ASSIGN_OR_RETURN(std::vector<std::string> parts, PySplit(self.as_string(), sep, maxsplit));
  MP_RETURN_IF_ERROR(runtime.CheckListSize(static_cast<int64_t>(parts.size())));
  std::vector<Value> items;
  for (std::string& part : parts) items.push_back(Value::String(std::move(part)));
  return runtime.MakeList(std::move(items));
}

// startswith / endswith: a string or a tuple of strings.
StatusOr<Value> Affix(const Value& self, const CallArgs& args, bool prefix) {
  MP_ASSIGN_OR_RETURN(auto bound,
                      BindArgs(prefix ? "startswith" : "endswith", args, {{"affix", {}}}));
  std::vector<Value> options;
  if (bound[0].is_list() && bound[0].as_list().is_tuple) {
    options = bound[0].as_list().items;
  } else {
    options.push_back(bound[0]);
  }
  const std::string& text = self.as_string();
  for (const Value& option : options) {
    if (!option.is_string()) {
      return InvalidArgumentError(std::string(prefix ? "startswith" : "endswith") +
                                  " needs a string or a tuple of strings, not '" +
                                  TypeName(option) + "'");
    }
    const std::string& a = option.as_string();
    if (a.size() <= text.size() &&
        text.compare(prefix ? 0 : text.size() - a.size(), a.size(), a) == 0) {
      return Value::Bool(true);
    }
  }
  return Value::Bool(false);
}

StatusOr<Value> Case(Runtime& runtime, const Value& self, const CallArgs& args, const char* name,
                     CaseMap map) {
  MP_RETURN_IF_ERROR(BindArgs(name, args, {}).status());
  MP_ASSIGN_OR_RETURN(std::string text, PyCase(self.as_string(), map));
  return runtime.MakeString(std::move(text));
}

StatusOr<Value> Replace(Runtime& runtime, const Value& self, const CallArgs& args) {
  MP_ASSIGN_OR_RETURN(
      auto bound, BindArgs("replace", args, {{"old", {}}, {"new", {}}, {"count", Value::Int(-1)}}));
  if (!bound[0].is_string() || !bound[1].is_string()) {
    return InvalidArgumentError("replace() needs strings");
  }
  MP_ASSIGN_OR_RETURN(int64_t count, Integer(bound[2], "count"));
  return runtime.MakeString(
      PyReplace(self.as_string(), bound[0].as_string(), bound[1].as_string(), count));
}

StatusOr<Value> Join(Runtime& runtime, const Value& self, const CallArgs& args) {
  MP_ASSIGN_OR_RETURN(auto bound, BindArgs("join", args, {{"iterable", {}}}));
  MP_ASSIGN_OR_RETURN(std::vector<Value> items, runtime.Iterate(bound[0]));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_string()) {
      return InvalidArgumentError("join(): item " + std::to_string(i) + " is a '" +
                                  TypeName(items[i]) + "', not a string");
    }
    if (i > 0) out += self.as_string();
    out += items[i].as_string();
    if (static_cast<int64_t>(out.size()) > runtime.limits().max_output_bytes)
      break;  // refused below
  }
  return runtime.MakeString(std::move(out));
}

StatusOr<Value> DictView(Runtime& runtime, const Value& self, const CallArgs& args,
                         const char* name) {
  MP_RETURN_IF_ERROR(BindArgs(name, args, {}).status());
  std::vector<Value> items;
  for (const auto& [key, value] : self.as_dict().items) {
    if (name[0] == 'k') {
      items.push_back(Value::String(key));
    } else if (name[0] == 'v') {
      items.push_back(value);
    } else {
      items.push_back(Value::List({Value::String(key), value}, /*is_tuple=*/true));
    }
  }
  return runtime.MakeList(std::move(items));
}

StatusOr<Value> Get(const Value& self, const CallArgs& args) {
  MP_ASSIGN_OR_RETURN(auto bound, BindArgs("get", args, {{"key", {}}, {"default", Value::None()}}));
  if (bound[0].is_string()) {
    if (const Value* v = self.as_dict().Find(bound[0].as_string())) return *v;
  }
  return bound[1];
}

StatusOr<Value> CallMethod(Runtime& runtime, const Value& self, const std::string& name,
                           const CallArgs& args) {
  if (self.is_dict()) {
    if (name == "get") return Get(self, args);
    return DictView(runtime, self, args, name.c_str());
  }
  if (name == "strip") return Strip(runtime, self, args, "strip", StripSide::kBoth);
  if (name == "lstrip") return Strip(runtime, self, args, "lstrip", StripSide::kLeft);
  if (name == "rstrip") return Strip(runtime, self, args, "rstrip", StripSide::kRight);
  if (name == "split") return Split(runtime, self, args);
  if (name == "startswith") return Affix(self, args, true);
  if (name == "endswith") return Affix(self, args, false);
  if (name == "upper") return Case(runtime, self, args, "upper", CaseMap::kUpper);
  if (name == "lower") return Case(runtime, self, args, "lower", CaseMap::kLower);
  if (name == "title") return Case(runtime, self, args, "title", CaseMap::kTitle);
  if (name == "capitalize") return Case(runtime, self, args, "capitalize", CaseMap::kCapitalize);
  if (name == "replace") return Replace(runtime, self, args);
  return Join(runtime, self, args);
}

constexpr std::string_view kStringMethods[] = {"strip",      "lstrip",     "rstrip",  "split",
                                               "startswith", "endswith",   "upper",   "lower",
                                               "title",      "capitalize", "replace", "join"};
constexpr std::string_view kDictMethods[] = {"items", "keys", "values", "get"};

}  // namespace

std::optional<Value> Method(Runtime& runtime, const Value& self, std::string_view name) {
  bool known = false;
  if (self.is_string()) {
    for (std::string_view m : kStringMethods) known |= m == name;
  } else if (self.is_dict()) {
    for (std::string_view m : kDictMethods) known |= m == name;
  }
  if (!known) return std::nullopt;
  std::string method(name);
  return Value::Function(method, [&runtime, self, method](CallArgs& args) {
    return CallMethod(runtime, self, method, args);
  });
}

}  // namespace millipede::jinja::internal
