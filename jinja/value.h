// The values a template computes with, with Python's semantics (Jinja evaluates Python objects):
// undefined, None, bool, int, float, str, list / tuple, dict (insertion-ordered, string keys),
// objects with attributes (namespace(), the loop variable) and functions (globals, filters'
// helpers, bound methods such as 'text'.strip). Lists, dicts and strings are immutable and shared;
// only an object's attributes change (`{% set ns.x = ... %}`).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/json_util.h"
#include "common/status.h"

namespace millipede::jinja {

class Value;

// Arguments of a call: positional, then keyword (`f(1, indent=4)`).
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

using NativeFunction = std::function<StatusOr<Value>(CallArgs& args)>;

struct ListData {
  std::vector<Value> items;
  bool is_tuple = false;
};

struct DictData {
  std::vector<std::pair<std::string, Value>> items;  // insertion order, unique keys
  const Value* Find(std::string_view key) const;
  void Set(std::string key, Value value);
};

// An object with attributes: a namespace() (attributes may be set) or the loop variable (its
// attributes follow from the items and the round).
struct ObjectData {
  std::string type_name;  // "Namespace" or "LoopContext"
  DictData attributes;
  std::shared_ptr<const std::vector<Value>> loop_items;
  size_t loop_index = 0;
};

// The attribute `name` of a loop variable (index, index0, revindex, revindex0, first, last,
// length, depth, depth0, previtem, nextitem); nullopt for other names.
std::optional<Value> LoopAttribute(const ObjectData& loop, std::string_view name);

struct FunctionData {
  std::string name;
  NativeFunction call;
};

class Value {
 public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kObject,
    kFunction
  };

  // Undefined; `name` is what was looked up, for error messages ("'x' is undefined").
  Value() = default;
  static Value Undefined(std::string name);
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value String(std::string s);
  static Value List(std::vector<Value> items, bool is_tuple = false);
  static Value Dict(DictData dict);
  static Value Object(std::string type_name, DictData attributes);
  static Value Function(std::string name, NativeFunction call);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  // bool, int or float (Python's numbers.Number).
  bool is_number() const {
    return kind_ == Kind::kBool || kind_ == Kind::kInt || kind_ == Kind::kFloat;
  }

  // Levels of lists and dicts: 0 for scalars, objects and functions, 1 + the deepest item for
  // lists and dicts.
  int depth() const { return depth_; }

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }  // bool and int (bool as 0/1)
  double as_float() const;                 // any number
  // string; undefined: what was undefined (a message)
  const std::string& as_string() const;
  const ListData& as_list() const { return *static_cast<const ListData*>(data_.get()); }
  const DictData& as_dict() const { return *static_cast<const DictData*>(data_.get()); }
  ObjectData& as_object() const { return *static_cast<ObjectData*>(data_.get()); }
  const FunctionData& as_function() const { return *static_cast<const FunctionData*>(data_.get()); }

 private:
  // 32 bytes: lists of a million values stay small.
  Kind kind_ = Kind::kUndefined;
  int depth_ = 0;
  union {
    int64_t int_ = 0;  // bool and int
    double float_;
  };
  // By kind: std::string (string; undefined: its name), ListData, DictData, ObjectData or
  // FunctionData. Shared: values are immutable, but for an object's attributes.
  std::shared_ptr<void> data_;
};

// Python's type name ("str", "int", "list", "dict", "NoneType", "Undefined", ...).
const char* TypeName(const Value& v);

// bool(v): false for undefined, None, 0, 0.0, "", [] and {}.
bool Truthy(const Value& v);

// Python's ==: numbers across bool / int / float, lists and tuples element-wise (a list never
// equals a tuple), dicts by content regardless of order, undefined equal to undefined.
// InvalidArgument past kMaxValueDepth levels of nesting.
StatusOr<bool> Equals(const Value& a, const Value& b, int depth = 0);

// Python's <, for the orderable pairs (numbers, strings, lists of orderable items); a TypeError
// for others, as an InvalidArgument naming both types.
StatusOr<bool> Less(const Value& a, const Value& b, int depth = 0);

// str(v) as Jinja prints it: undefined is "", None "None", True "True", floats as Python prints
// them, strings as they are, lists and dicts as their repr.
StatusOr<std::string> ToStr(const Value& v);
// repr(v): strings quoted.
StatusOr<std::string> Repr(const Value& v, int depth = 0);

// Deepest nesting of lists / dicts that the recursive helpers accept.
inline constexpr int kMaxValueDepth = 128;

// JSON to a value: objects become dicts (in the JSON object's order: sorted for Json, as written
// for OrderedJson), integers ints (unsigned ones above 2^63 - 1 are an error), other numbers
// floats.
using OrderedJson = nlohmann::ordered_json;
StatusOr<Value> FromJson(const Json& json, int depth = 0);
StatusOr<Value> FromJson(const OrderedJson& json, int depth = 0);

// Python's json.dumps(v, ensure_ascii, indent, separators, sort_keys), as transformers' tojson
// filter calls it. `indent` is absent (nullopt: one line) or the text one level indents by.
struct DumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  // Text longer than this is an error (ResourceExhausted) rather than built in full.
  size_t max_bytes = SIZE_MAX;
};
StatusOr<std::string> DumpJson(const Value& v, const DumpOptions& options);

}  // namespace millipede::jinja
