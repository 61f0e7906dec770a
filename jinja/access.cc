// Access to values: attributes, items, slices, iteration and membership, as Jinja resolves them
// over Python objects.
#include <algorithm>

#include "jinja/builtins.h"
#include "jinja/py_text.h"

namespace millipede::jinja::internal {
namespace {

// Python methods of dicts, lists and strings this engine does not provide: naming them is an error
// rather than a silent lookup of a key or an undefined value. (The sandbox transformers renders in
// forbids the ones that modify.)
constexpr std::string_view kDictMethods[] = {"copy",       "pop",   "popitem", "update",
                                             "setdefault", "clear", "fromkeys"};
constexpr std::string_view kListMethods[] = {"append", "extend",  "insert", "pop",
                                             "remove", "reverse", "sort",   "index",
                                             "count",  "copy",    "clear"};
constexpr std::string_view kStringMethods[] = {
    "casefold",     "center",       "count",        "encode",    "expandtabs", "find",
    "format",       "format_map",   "index",        "isalnum",   "isalpha",    "isascii",
    "isdecimal",    "isdigit",      "isidentifier", "islower",   "isnumeric",  "isprintable",
    "isspace",      "istitle",      "isupper",      "ljust",     "maketrans",  "partition",
    "removeprefix", "removesuffix", "rfind",        "rindex",    "rjust",      "rpartition",
    "rsplit",       "splitlines",   "swapcase",     "translate", "zfill"};

template <size_t N>
bool Listed(const std::string_view (&names)[N], std::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

Value Missing(const Value& value, std::string_view name) {
  return Value::Undefined(std::string("'") + TypeName(value) + " object' has no attribute '" +
                          std::string(name) + "'");
}

// Python's index normalisation: negative counts from the end; nullopt when out of range.
std::optional<size_t> Index(int64_t index, size_t size) {
  if (index < 0) index += static_cast<int64_t>(size);
  if (index < 0 || index >= static_cast<int64_t>(size)) return std::nullopt;
  return static_cast<size_t>(index);
}

}  // namespace

StatusOr<Value> Runtime::GetAttribute(const Value& value, std::string_view name) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return InvalidArgumentError(value.as_string());
    case Value::Kind::kDict: {
      if (std::optional<Value> method = Method(*this, value, name)) return *method;
      if (Listed(kDictMethods, name)) {
        return InvalidArgumentError("the dict method '" + std::string(name) +
                                    "' is not supported by this template engine");
      }
      const Value* item = value.as_dict().Find(name);
      return item != nullptr ? *item : Missing(value, name);
    }
    case Value::Kind::kObject: {
      if (value.as_object().loop_items) {
        if (name == "cycle" || name == "changed") {
          return InvalidArgumentError("loop." + std::string(name) +
                                      "() is not supported by this template engine");
        }
        std::optional<Value> attr = LoopAttribute(value.as_object(), name);
        return attr ? *attr : Missing(value, name);
      }
      const Value* attr = value.as_object().attributes.Find(name);
      return attr != nullptr ? *attr : Missing(value, name);
    }
    case Value::Kind::kString:
      if (std::optional<Value> method = Method(*this, value, name)) return *method;
      if (Listed(kStringMethods, name)) {
        return InvalidArgumentError("the str method '" + std::string(name) +
                                    "' is not supported by this template engine");
      }
      return Missing(value, name);
    case Value::Kind::kList:
      if (Listed(kListMethods, name)) {
        return InvalidArgumentError("the list method '" + std::string(name) +
                                    "' is not supported by this template engine");
      }
      return Missing(value, name);
    default:
      return Missing(value, name);
  }
}

StatusOr<Value> Runtime::GetItem(const Value& value, const Value& key) {
  if (value.is_undefined()) return InvalidArgumentError(value.as_string());
  const bool int_key = key.kind() == Value::Kind::kInt || key.kind() == Value::Kind::kBool;
  if (value.is_dict() && key.is_string()) {
    const Value* item = value.as_dict().Find(key.as_string());
    if (item != nullptr) return *item;
  } else if (value.is_list() && int_key) {
    const auto& items = value.as_list().items;
    if (auto i = Index(key.as_int(), items.size())) return items[*i];
    return Value::Undefined(std::string(TypeName(value)) + " object has no element " +
                            std::to_string(key.as_int()));
  } else if (value.is_string() && int_key) {
    const std::string& text = value.as_string();
    if (IsAscii(text)) {
      if (auto i = Index(key.as_int(), text.size())) return Value::String(text.substr(*i, 1));
      return Value::Undefined("string index " + std::to_string(key.as_int()) + " out of range");
    }
    const std::u32string cps = DecodeUtf8(text);
    if (auto i = Index(key.as_int(), cps.size())) {
      return Value::String(EncodeUtf8(std::u32string_view(cps).substr(*i, 1)));
    }
    return Value::Undefined("string index " + std::to_string(key.as_int()) + " out of range");
  }
  // Jinja falls back to the attribute of that name.
  if (key.is_string()) return GetAttribute(value, key.as_string());
  StatusOr<std::string> shown = Repr(key);
  return Value::Undefined(std::string("'") + TypeName(value) + " object' has no element " +
                          (shown.ok() ? *shown : std::string("?")));
}

StatusOr<std::vector<Value>> Runtime::Iterate(const Value& value) {
  std::vector<Value> items;
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return items;
    case Value::Kind::kList:
      MP_RETURN_IF_ERROR(Charge(static_cast<int64_t>(value.as_list().items.size())));
      return value.as_list().items;
    case Value::Kind::kDict:
      for (const auto& [key, unused] : value.as_dict().items) items.push_back(Value::String(key));
      MP_RETURN_IF_ERROR(Charge(static_cast<int64_t>(items.size())));
      return items;
    case Value::Kind::kString: {
      const std::u32string cps = DecodeUtf8(value.as_string());
      MP_RETURN_IF_ERROR(CheckListSize(static_cast<int64_t>(cps.size())));
      MP_RETURN_IF_ERROR(Charge(static_cast<int64_t>(cps.size())));
      for (char32_t cp : cps) items.push_back(Value::String(EncodeUtf8(std::u32string(1, cp))));
      return items;
    }
    default:
      return InvalidArgumentError(std::string("'") + TypeName(value) + "' object is not iterable");
  }
}

StatusOr<bool> Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        return InvalidArgumentError(std::string("'in <string>' requires a string, not '") +
                                    TypeName(item) + "'");
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : container.as_list().items) {
        MP_ASSIGN_OR_RETURN(bool same, Equals(v, item));
        if (same) return true;
      }
      return false;
    case Value::Kind::kDict:
      return item.is_string() && container.as_dict().Find(item.as_string()) != nullptr;
    default:
      return InvalidArgumentError(std::string("argument of type '") + TypeName(container) +
                                  "' is not iterable");
  }
}

StatusOr<Value> Slice(Runtime& runtime, const Value& value, std::optional<int64_t> start,
                      std::optional<int64_t> stop, std::optional<int64_t> step) {
  if (value.is_undefined()) return InvalidArgumentError(value.as_string());
  if (!value.is_string() && !value.is_list()) {
    return Value::Undefined(std::string("'") + TypeName(value) + "' object cannot be sliced");
  }
  const int64_t by = step.value_or(1);
  MP_REQUIRE(by != 0, "slice step cannot be zero");
  // Strings by code point; ASCII text (the common case) without decoding.
  const bool ascii = value.is_string() && IsAscii(value.as_string());
  std::u32string cps;
  if (value.is_string() && !ascii) cps = DecodeUtf8(value.as_string());
  const auto size =
      static_cast<int64_t>(value.is_string() ? (ascii ? value.as_string().size() : cps.size())
                                             : value.as_list().items.size());
  // Python's slice.indices(): clamp each bound into range for the step's direction.
  auto clamp = [&](std::optional<int64_t> bound, int64_t fallback) {
    if (!bound) return fallback;
    int64_t b = *bound < 0 ? *bound + size : *bound;
    if (by > 0) return std::clamp<int64_t>(b, 0, size);
    return std::clamp<int64_t>(b, -1, size - 1);
  };
  const int64_t from = clamp(start, by > 0 ? 0 : size - 1);
  const int64_t to = clamp(stop, by > 0 ? size : -1);
  MP_REQUIRE(by != INT64_MIN, "slice step is too large");
  const int64_t span = by > 0 ? to - from : from - to;
  const int64_t stride = by > 0 ? by : -by;
  const int64_t count = span <= 0 ? 0 : 1 + (span - 1) / stride;
  // Charged (and so bounded) before anything is built; the indexes are from + k * by.
  MP_RETURN_IF_ERROR(runtime.Charge(count / 8));
  if (value.is_list()) MP_RETURN_IF_ERROR(runtime.CheckListSize(count));
  if (ascii) {
    if (by == 1) return runtime.MakeString(value.as_string().substr(from, count));
    std::string out;
    for (int64_t k = 0; k < count; ++k) out.push_back(value.as_string()[from + k * by]);
    return runtime.MakeString(std::move(out));
  }
  if (value.is_string()) {
    std::u32string out;
    for (int64_t k = 0; k < count; ++k) out.push_back(cps[from + k * by]);
    return runtime.MakeString(EncodeUtf8(out));
  }
  std::vector<Value> out;
  out.reserve(count);
  for (int64_t k = 0; k < count; ++k) out.push_back(value.as_list().items[from + k * by]);
  return runtime.MakeList(std::move(out), value.as_list().is_tuple);
}

}  // namespace millipede::jinja::internal
