#include "jinja/value.h"

#include <algorithm>
#include <limits>

#include "jinja/py_text.h"

namespace millipede::jinja {

const Value* DictData::Find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void DictData::Set(std::string key, Value value) {
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

Value Value::Undefined(std::string name) {
  Value v;
  v.data_ = std::make_shared<std::string>(std::move(name));
  return v;
}

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.int_ = b ? 1 : 0;
  return v;
}

Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.int_ = i;
  return v;
}

Value Value::Float(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.float_ = f;
  return v;
}

Value Value::String(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.data_ = std::make_shared<std::string>(std::move(s));
  return v;
}

Value Value::List(std::vector<Value> items, bool is_tuple) {
  Value v;
  v.kind_ = Kind::kList;
  for (const Value& item : items) v.depth_ = std::max(v.depth_, item.depth_);
  ++v.depth_;
  v.data_ = std::make_shared<ListData>(ListData{std::move(items), is_tuple});
  return v;
}

Value Value::Dict(DictData dict) {
  Value v;
  v.kind_ = Kind::kDict;
  for (const auto& [key, item] : dict.items) v.depth_ = std::max(v.depth_, item.depth_);
  ++v.depth_;
  v.data_ = std::make_shared<DictData>(std::move(dict));
  return v;
}

Value Value::Object(std::string type_name, DictData attributes) {
  Value v;
  v.kind_ = Kind::kObject;
  v.data_ = std::make_shared<ObjectData>(ObjectData{std::move(type_name), std::move(attributes)});
  return v;
}

Value Value::Function(std::string name, NativeFunction call) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.data_ = std::make_shared<FunctionData>(FunctionData{std::move(name), std::move(call)});
  return v;
}

const std::string& Value::as_string() const {
  static const std::string kUnnamed = "a value is undefined";
  return data_ ? *static_cast<const std::string*>(data_.get()) : kUnnamed;
}

double Value::as_float() const {
  return kind_ == Kind::kFloat ? float_ : static_cast<double>(int_);
}

std::optional<Value> LoopAttribute(const ObjectData& loop, std::string_view name) {
  const auto n = static_cast<int64_t>(loop.loop_items->size());
  const auto i = static_cast<int64_t>(loop.loop_index);
  if (name == "index") return Value::Int(i + 1);
  if (name == "index0") return Value::Int(i);
  if (name == "revindex") return Value::Int(n - i);
  if (name == "revindex0") return Value::Int(n - i - 1);
  if (name == "first") return Value::Bool(i == 0);
  if (name == "last") return Value::Bool(i == n - 1);
  if (name == "length") return Value::Int(n);
  if (name == "depth") return Value::Int(1);
  if (name == "depth0") return Value::Int(0);
  if (name == "previtem") {
    return i > 0 ? (*loop.loop_items)[loop.loop_index - 1]
                 : Value::Undefined("there is no previous item");
  }
  if (name == "nextitem") {
    return i + 1 < n ? (*loop.loop_items)[loop.loop_index + 1]
                     : Value::Undefined("there is no next item");
  }
  return std::nullopt;
}

const char* TypeName(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kList:
      return v.as_list().is_tuple ? "tuple" : "list";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kObject:
      return v.as_object().type_name.c_str();
    case Value::Kind::kFunction:
      return "builtin_function_or_method";
  }
  return "object";
}

bool Truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
    case Value::Kind::kInt:
      return v.as_int() != 0;
    case Value::Kind::kFloat:
      return v.as_float() != 0;
    case Value::Kind::kString:
      return !v.as_string().empty();
    case Value::Kind::kList:
      return !v.as_list().items.empty();
    case Value::Kind::kDict:
      return !v.as_dict().items.empty();
    default:
      return true;
  }
}

namespace {

Status TooDeep() {
  return InvalidArgumentError("values nest deeper than " + std::to_string(kMaxValueDepth) +
                              " levels");
}

bool BothIntegral(const Value& a, const Value& b) {
  return a.kind() != Value::Kind::kFloat && b.kind() != Value::Kind::kFloat;
}

}  // namespace

StatusOr<bool> Equals(const Value& a, const Value& b, int depth) {
  if (depth > kMaxValueDepth) return TooDeep();
  if (a.is_number() && b.is_number()) {
    return BothIntegral(a, b) ? a.as_int() == b.as_int() : a.as_float() == b.as_float();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      const ListData& x = a.as_list();
      const ListData& y = b.as_list();
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        MP_ASSIGN_OR_RETURN(bool same, Equals(x.items[i], y.items[i], depth + 1));
        if (!same) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const DictData& x = a.as_dict();
      const DictData& y = b.as_dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [key, value] : x.items) {
        const Value* other = y.Find(key);
        if (other == nullptr) return false;
        MP_ASSIGN_OR_RETURN(bool same, Equals(value, *other, depth + 1));
        if (!same) return false;
      }
      return true;
    }
    case Value::Kind::kObject:
      return &a.as_object() == &b.as_object();
    case Value::Kind::kFunction:
      return &a.as_function() == &b.as_function();
    default:
      return false;
  }
}

StatusOr<bool> Less(const Value& a, const Value& b, int depth) {
  if (depth > kMaxValueDepth) return TooDeep();
  if (a.is_number() && b.is_number()) {
    return BothIntegral(a, b) ? a.as_int() < b.as_int() : a.as_float() < b.as_float();
  }
  // UTF-8 byte order is code point order, as Python compares strings.
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      MP_ASSIGN_OR_RETURN(bool same, Equals(x[i], y[i], depth + 1));
      if (!same) return Less(x[i], y[i], depth + 1);
    }
    return x.size() < y.size();
  }
  return InvalidArgumentError(std::string("'<' is not supported between '") + TypeName(a) +
                              "' and '" + TypeName(b) + "'");
}

StatusOr<std::string> ToStr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return std::string();
    case Value::Kind::kString:
      return v.as_string();
    default:
      return Repr(v);
  }
}

StatusOr<std::string> Repr(const Value& v, int depth) {
  if (depth > kMaxValueDepth) return TooDeep();
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return std::string("Undefined");
    case Value::Kind::kNone:
      return std::string("None");
    case Value::Kind::kBool:
      return std::string(v.as_bool() ? "True" : "False");
    case Value::Kind::kInt:
      return std::to_string(v.as_int());
    case Value::Kind::kFloat:
      return PyFloatRepr(v.as_float());
    case Value::Kind::kString:
      return PyStringRepr(v.as_string());
    case Value::Kind::kList: {
      const ListData& list = v.as_list();
      std::string out = list.is_tuple ? "(" : "[";
      for (size_t i = 0; i < list.items.size(); ++i) {
        if (i > 0) out += ", ";
        MP_ASSIGN_OR_RETURN(std::string item, Repr(list.items[i], depth + 1));
        out += item;
      }
      if (list.is_tuple && list.items.size() == 1) out += ",";
      return out + (list.is_tuple ? ")" : "]");
    }
    case Value::Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [key, value] : v.as_dict().items) {
        if (!first) out += ", ";
        first = false;
        MP_ASSIGN_OR_RETURN(std::string item, Repr(value, depth + 1));
        out += PyStringRepr(key) + ": " + item;
      }
      return out + "}";
    }
    case Value::Kind::kObject: {
      const ObjectData& object = v.as_object();
      if (object.loop_items) {
        return "<LoopContext " + std::to_string(object.loop_index + 1) + "/" +
               std::to_string(object.loop_items->size()) + ">";
      }
      MP_ASSIGN_OR_RETURN(std::string attrs, Repr(Value::Dict(object.attributes), depth + 1));
      return "<" + object.type_name + " " + attrs + ">";
    }
    case Value::Kind::kFunction:
      return "<built-in function " + v.as_function().name + ">";
  }
  return std::string();
}

namespace {

template <typename J>
StatusOr<Value> FromAnyJson(const J& json, int depth) {
  if (depth > kMaxValueDepth) return TooDeep();
  switch (json.type()) {
    case J::value_t::null:
      return Value::None();
    case J::value_t::boolean:
      return Value::Bool(json.template get<bool>());
    case J::value_t::number_integer:
      return Value::Int(json.template get<int64_t>());
    case J::value_t::number_unsigned: {
      const uint64_t u = json.template get<uint64_t>();
      MP_REQUIRE(u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), "integer ", u,
                 " is too large for the template engine");
      return Value::Int(static_cast<int64_t>(u));
    }
    case J::value_t::number_float:
      return Value::Float(json.template get<double>());
    case J::value_t::string:
      return Value::String(json.template get<std::string>());
    case J::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const J& item : json) {
        MP_ASSIGN_OR_RETURN(Value v, FromAnyJson(item, depth + 1));
        items.push_back(std::move(v));
      }
      return Value::List(std::move(items));
    }
    case J::value_t::object: {
      DictData dict;
      for (const auto& [key, item] : json.items()) {
        MP_ASSIGN_OR_RETURN(Value v, FromAnyJson(item, depth + 1));
        dict.items.emplace_back(key, std::move(v));
      }
      return Value::Dict(std::move(dict));
    }
    default:
      return InvalidArgumentError("JSON binary values cannot be used in templates");
  }
}

}  // namespace

StatusOr<Value> FromJson(const Json& json, int depth) { return FromAnyJson(json, depth); }

StatusOr<Value> FromJson(const OrderedJson& json, int depth) { return FromAnyJson(json, depth); }

}  // namespace millipede::jinja
