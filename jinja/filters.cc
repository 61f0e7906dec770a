// Filters. Text filters first turn their subject into a string as Jinja does (undefined gives "",
// None "None"); tojson is transformers' json.dumps version (no HTML escaping).
#include <algorithm>
#include <charconv>
#include <cmath>

#include "jinja/builtins.h"
#include "jinja/py_text.h"

namespace millipede::jinja::internal {
namespace {

using FilterFn = StatusOr<Value> (*)(Runtime&, const Value&, CallArgs&);

StatusOr<Value> Text(Runtime& runtime, const Value& v, CallArgs& args, const char* name,
                     CaseMap map) {
  MP_RETURN_IF_ERROR(BindArgs(name, args, {}).status());
  MP_ASSIGN_OR_RETURN(std::string text, ToStr(v));
  MP_ASSIGN_OR_RETURN(text, PyCase(text, map));
  return runtime.MakeString(std::move(text));
}

StatusOr<Value> Upper(Runtime& r, const Value& v, CallArgs& a) {
  return Text(r, v, a, "upper", CaseMap::kUpper);
}
StatusOr<Value> Lower(Runtime& r, const Value& v, CallArgs& a) {
  return Text(r, v, a, "lower", CaseMap::kLower);
}
StatusOr<Value> Title(Runtime& r, const Value& v, CallArgs& a) {
  return Text(r, v, a, "title", CaseMap::kJinjaTitle);
}
StatusOr<Value> Capitalize(Runtime& r, const Value& v, CallArgs& a) {
  return Text(r, v, a, "capitalize", CaseMap::kCapitalize);
}

StatusOr<Value> Trim(Runtime& runtime, const Value& v, CallArgs& args) {
  MP_ASSIGN_OR_RETURN(auto a, BindArgs("trim", args, {{"chars", Value::None()}}));
  MP_ASSIGN_OR_RETURN(std::string text, ToStr(v));
  std::optional<std::string> chars;
  if (!a[0].is_none()) {
    if (!a[0].is_string()) return InvalidArgumentError("trim(): chars must be a string");
    chars = a[0].as_string();
  }
  MP_RETURN_IF_ERROR(runtime.Charge(static_cast<int64_t>(text.size() / 64)));
  return Value::String(PyStrip(text, chars, StripSide::kBoth));
}

StatusOr<Value> String(Runtime& runtime, const Value& v, CallArgs& args) {
  MP_RETURN_IF_ERROR(BindArgs("string", args, {}).status());
  MP_ASSIGN_OR_RETURN(std::string text, ToStr(v));
  return runtime.MakeString(std::move(text));
}

StatusOr<Value> Replace(Runtime& runtime, const Value& v, CallArgs& args) {
  MP_ASSIGN_OR_RETURN(
      auto a, BindArgs("replace", args, {{"old", {}}, {"new", {}}, {"count", Value::None()}}));
  MP_ASSIGN_OR_RETURN(std::string text, ToStr(v));
  MP_ASSIGN_OR_RETURN(std::string old_text, ToStr(a[0]));
  MP_ASSIGN_OR_RETURN(std::string new_text, ToStr(a[1]));
  int64_t count = -1;
  if (!a[2].is_none()) {
    if (a[2].kind() != Value::Kind::kInt)
      return InvalidArgumentError("replace(): count must be an integer");
    count = a[2].as_int();
  }
  return runtime.MakeString(PyReplace(text, old_text, new_text, count));
}

StatusOr<Value> Length(Runtime&, const Value& v, CallArgs& args) {
  MP_RETURN_IF_ERROR(BindArgs("length", args, {}).status());
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return Value::Int(0);
    case Value::Kind::kString:
      return Value::Int(CodePointCount(v.as_string()));
    case Value::Kind::kList:
      return Value::Int(static_cast<int64_t>(v.as_list().items.size()));
    case Value::Kind::kDict:
      return Value::Int(static_cast<int64_t>(v.as_dict().items.size()));
    default:
      return InvalidArgumentError(std::string("object of type '") + TypeName(v) + "' has no len()");
  }
}

StatusOr<Value> Default(Runtime&, const Value& v, CallArgs& args) {
  MP_ASSIGN_OR_RETURN(
      auto a, BindArgs("default", args,
                       {{"default_value", Value::String("")}, {"boolean", Value::Bool(false)}}));
  const bool use_default = v.is_undefined() || (Truthy(a[1]) && !Truthy(v));
  return use_default ? a[0] : v;
}

StatusOr<Value> List(Runtime& runtime, const Value& v, CallArgs& args) {
  MP_RETURN_IF_ERROR(BindArgs("list", args, {}).status());
  MP_ASSIGN_OR_RETURN(std::vector<Value> items, runtime.Iterate(v));
  return runtime.MakeList(std::move(items));
}

StatusOr<Value> FirstOrLast(Runtime& runtime, const Value& v, CallArgs& args, bool first) {
  MP_RETURN_IF_ERROR(BindArgs(first ? "first" : "last", args, {}).status());
  MP_ASSIGN_OR_RETURN(std::vector<Value> items, runtime.Iterate(v));
  if (items.empty()) return Value::Undefined("the sequence has no items");
  return first ? items.front() : items.back();
}
StatusOr<Value> First(Runtime& r, const Value& v, CallArgs& a) {
  return FirstOrLast(r, v, a, true);
}
StatusOr<Value> Last(Runtime& r, const Value& v, CallArgs& a) {
  return FirstOrLast(r, v, a, false);
}

StatusOr<Value> Reverse(Runtime& runtime, const Value& v, CallArgs& args) {
  MP_RETURN_IF_ERROR(BindArgs("reverse", args, {}).status());
  if (v.is_string()) {
    std::u32string cps = DecodeUtf8(v.as_string());
    std::reverse(cps.begin(), cps.end());
    return runtime.MakeString(EncodeUtf8(cps));
  }
  MP_ASSIGN_OR_RETURN(std::vector<Value> items, runtime.Iterate(v));
  std::reverse(items.begin(), items.end());
  return runtime.MakeList(std::move(items));
}

StatusOr<Value> Items(Runtime& runtime, const Value& v, CallArgs& args) {
  MP_RETURN_IF_ERROR(BindArgs("items", args, {}).status());
  if (v.is_undefined()) return Value::List({});
  if (!v.is_dict()) return InvalidArgumentError("the items filter needs a mapping");
  std::vector<Value> pairs;
  for (const auto& [key, value] : v.as_dict().items) {
    pairs.push_back(Value::List({Value::String(key), value}, /*is_tuple=*/true));
  }
  return runtime.MakeList(std::move(pairs));
}

// Jinja's attribute getter for filters: "a.b" looks up a then b, each as an item first.
StatusOr<Value> GetPath(Runtime& runtime, const Value& item, const Value& attribute) {
  if (attribute.kind() == Value::Kind::kInt) return runtime.GetItem(item, attribute);
  if (!attribute.is_string()) return InvalidArgumentError("attribute must be a string");
  Value current = item;
  const std::string& path = attribute.as_string();
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? dot : dot - start);
    // A part of digits is an index (Jinja's attribute getter), if it fits.
    int64_t index = 0;
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), index);
    const bool numeric =
        !part.empty() && ec == std::errc() && end == part.data() + part.size() && part[0] != '-';
    MP_ASSIGN_OR_RETURN(
        current, runtime.GetItem(current, numeric ? Value::Int(index) : Value::String(part)));
    if (dot == std::string::npos) return current;
    start = dot + 1;
  }
}

StatusOr<Value> Join(Runtime& runtime, const Value& v, CallArgs& args) {
  MP_ASSIGN_OR_RETURN(
      auto a, BindArgs("join", args, {{"d", Value::String("")}, {"attribute", Value::None()}}));
  MP_ASSIGN_OR_RETURN(std::string separator, ToStr(a[0]));
  MP_ASSIGN_OR_RETURN(std::vector<Value> items, runtime.Iterate(v));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    Value item = items[i];
    if (!a[1].is_none()) {
      MP_ASSIGN_OR_RETURN(item, GetPath(runtime, item, a[1]));
    }
    MP_ASSIGN_OR_RETURN(std::string text, ToStr(item));
    if (i > 0) out += separator;
    out += text;
    if (static_cast<int64_t>(out.size()) > runtime.limits().max_output_bytes) break;
  }
  return runtime.MakeString(std::move(out));
}

// select / reject (a test over the items) and selectattr / rejectattr (over an attribute).
StatusOr<Value> Select(Runtime& runtime, const Value& v, CallArgs& args, bool keep,
                       bool by_attribute) {
  MP_ASSIGN_OR_RETURN(std::vector<Value> items, runtime.Iterate(v));
  std::vector<Value> rest = args.positional;
  if (!args.keyword.empty())
    return InvalidArgumentError("select filters take no keyword arguments");
  Value attribute;
  if (by_attribute) {
    if (rest.empty()) return InvalidArgumentError("selectattr / rejectattr need an attribute");
    attribute = rest.front();
    rest.erase(rest.begin());
  }
  std::optional<std::string> test;
  if (!rest.empty()) {
    if (!rest.front().is_string()) return InvalidArgumentError("the test name must be a string");
    test = rest.front().as_string();
    rest.erase(rest.begin());
  }
  std::vector<Value> out;
  for (const Value& item : items) {
    MP_RETURN_IF_ERROR(runtime.Charge(1));
    Value subject = item;
    if (by_attribute) {
      MP_ASSIGN_OR_RETURN(subject, GetPath(runtime, item, attribute));
    }
    bool pass = Truthy(subject);
    if (test) {
      CallArgs test_args;
      test_args.positional = rest;
      MP_ASSIGN_OR_RETURN(pass, runtime.ApplyTest(*test, subject, test_args));
    }
    if (pass == keep) out.push_back(item);
  }
  return runtime.MakeList(std::move(out));
}
StatusOr<Value> SelectItems(Runtime& r, const Value& v, CallArgs& a) {
  return Select(r, v, a, true, false);
}
StatusOr<Value> RejectItems(Runtime& r, const Value& v, CallArgs& a) {
  return Select(r, v, a, false, false);
}
StatusOr<Value> SelectAttr(Runtime& r, const Value& v, CallArgs& a) {
  return Select(r, v, a, true, true);
}
StatusOr<Value> RejectAttr(Runtime& r, const Value& v, CallArgs& a) {
  return Select(r, v, a, false, true);
}

// map(attribute="x" [, default=...]) or map("filter", args...).
StatusOr<Value> Map(Runtime& runtime, const Value& v, CallArgs& args) {
  MP_ASSIGN_OR_RETURN(std::vector<Value> items, runtime.Iterate(v));
  std::vector<Value> out;
  if (args.positional.empty()) {
    MP_ASSIGN_OR_RETURN(auto a, BindArgs("map", args, {{"attribute", {}}, {"default", Value()}}));
    for (const Value& item : items) {
      MP_ASSIGN_OR_RETURN(Value mapped, GetPath(runtime, item, a[0]));
      out.push_back(mapped.is_undefined() && !a[1].is_undefined() ? a[1] : mapped);
    }
    return runtime.MakeList(std::move(out));
  }
  if (!args.positional.front().is_string())
    return InvalidArgumentError("map(): the filter name must be a string");
  const std::string filter = args.positional.front().as_string();
  for (const Value& item : items) {
    CallArgs filter_args = args;
    filter_args.positional.erase(filter_args.positional.begin());
    MP_ASSIGN_OR_RETURN(Value mapped, runtime.ApplyFilter(filter, item, filter_args));
    out.push_back(std::move(mapped));
  }
  return runtime.MakeList(std::move(out));
}

}  // namespace

StatusOr<Value> NumberFilter(Runtime& runtime, std::string_view name, const Value& v,
                             CallArgs& args);
StatusOr<Value> ToJsonFilter(Runtime& runtime, const Value& v, CallArgs& args);

StatusOr<Value> Runtime::ApplyFilter(std::string_view name, const Value& v, CallArgs& args) {
  static const std::pair<std::string_view, FilterFn> kFilters[] = {{"upper", Upper},
                                                                   {"lower", Lower},
                                                                   {"title", Title},
                                                                   {"capitalize", Capitalize},
                                                                   {"trim", Trim},
                                                                   {"string", String},
                                                                   {"replace", Replace},
                                                                   {"length", Length},
                                                                   {"count", Length},
                                                                   {"default", Default},
                                                                   {"d", Default},
                                                                   {"list", List},
                                                                   {"first", First},
                                                                   {"last", Last},
                                                                   {"reverse", Reverse},
                                                                   {"items", Items},
                                                                   {"join", Join},
                                                                   {"select", SelectItems},
                                                                   {"reject", RejectItems},
                                                                   {"selectattr", SelectAttr},
                                                                   {"rejectattr", RejectAttr},
                                                                   {"map", Map},
                                                                   {"safe", String}};
  MP_RETURN_IF_ERROR(Charge(1));
  for (const auto& [filter_name, fn] : kFilters) {
    if (filter_name == name) return fn(*this, v, args);
  }
  if (name == "tojson") return ToJsonFilter(*this, v, args);
  if (name == "int" || name == "float" || name == "abs") return NumberFilter(*this, name, v, args);
  return InvalidArgumentError("the filter '" + std::string(name) +
                              "' is not supported by this template engine");
}

}  // namespace millipede::jinja::internal
