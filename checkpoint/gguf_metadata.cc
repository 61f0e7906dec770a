// GgufFile's metadata lookups and their typed conversions.
#include <cstdint>
#include <limits>
#include <string>

#include "checkpoint/gguf.h"

namespace millipede {
namespace {

using T = GgufValue::Type;

bool IsUnsigned(T t) {
  return t == T::kUint8 || t == T::kUint16 || t == T::kUint32 || t == T::kUint64;
}
bool IsSigned(T t) { return t == T::kInt8 || t == T::kInt16 || t == T::kInt32 || t == T::kInt64; }
bool IsFloat(T t) { return t == T::kFloat32 || t == T::kFloat64; }

std::string TypeString(const GgufValue& v) {
  if (v.type != T::kArray) return GgufValueTypeName(v.type);
  return std::string("array of ") + GgufValueTypeName(v.array_type);
}

// An integer value as int64; false for other types and for unsigned values above INT64_MAX.
bool ToInt(const GgufValue& v, int64_t* out) {
  if (IsSigned(v.type)) {
    *out = v.i;
    return true;
  }
  if (IsUnsigned(v.type) && v.u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    *out = static_cast<int64_t>(v.u);
    return true;
  }
  return false;
}

bool ToFloat(const GgufValue& v, double* out) {
  if (IsFloat(v.type)) *out = v.f;
  else if (IsSigned(v.type)) *out = static_cast<double>(v.i);
  else if (IsUnsigned(v.type)) *out = static_cast<double>(v.u);
  else return false;
  return true;
}

}  // namespace

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = values_.find(key);
  return it == values_.end() ? nullptr : &it->second;
}

namespace {

// The value of `key`, or NotFound naming the file and the key.
StatusOr<const GgufValue*> Lookup(const GgufFile& f, std::string_view key) {
  const GgufValue* v = f.Find(key);
  if (v == nullptr) {
    return NotFoundError(f.path() + ": no metadata key \"" + std::string(key) + "\"");
  }
  return v;
}

Status Mistyped(const GgufFile& f, std::string_view key, const GgufValue& v, const char* wanted) {
  return InvalidArgumentError(f.path() + ": metadata key \"" + std::string(key) + "\" holds " +
                              TypeString(v) + ", which does not convert to " + wanted);
}

Status DoesNotFit(const GgufFile& f, std::string_view key, uint64_t value) {
  return InvalidArgumentError(f.path() + ": metadata key \"" + std::string(key) + "\" holds " +
                              "uint64 " + std::to_string(value) + ", which does not fit int64");
}

}  // namespace

StatusOr<std::string> GgufFile::GetString(std::string_view key) const {
  MP_ASSIGN_OR_RETURN(const GgufValue* v, Lookup(*this, key));
  if (v->type != T::kString) return Mistyped(*this, key, *v, "string");
  return v->s;
}

StatusOr<int64_t> GgufFile::GetInt(std::string_view key) const {
  MP_ASSIGN_OR_RETURN(const GgufValue* v, Lookup(*this, key));
  int64_t out = 0;
  if (ToInt(*v, &out)) return out;
  if (IsUnsigned(v->type)) return DoesNotFit(*this, key, v->u);
  return Mistyped(*this, key, *v, "int64");
}

StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  MP_ASSIGN_OR_RETURN(const GgufValue* v, Lookup(*this, key));
  double out = 0;
  if (!ToFloat(*v, &out)) return Mistyped(*this, key, *v, "float64");
  return out;
}

StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  MP_ASSIGN_OR_RETURN(const GgufValue* v, Lookup(*this, key));
  if (v->type != T::kBool) return Mistyped(*this, key, *v, "bool");
  return v->u != 0;
}

StatusOr<std::vector<std::string>> GgufFile::GetStringArray(std::string_view key) const {
  MP_ASSIGN_OR_RETURN(const GgufValue* v, Lookup(*this, key));
  if (v->type != T::kArray || v->array_type != T::kString) {
    return Mistyped(*this, key, *v, "array of string");
  }
  std::vector<std::string> out;
  out.reserve(v->array.size());
  for (const GgufValue& e : v->array) out.push_back(e.s);
  return out;
}

StatusOr<std::vector<int64_t>> GgufFile::GetIntArray(std::string_view key) const {
  MP_ASSIGN_OR_RETURN(const GgufValue* v, Lookup(*this, key));
  if (v->type != T::kArray || !(IsSigned(v->array_type) || IsUnsigned(v->array_type))) {
    return Mistyped(*this, key, *v, "array of int64");
  }
  std::vector<int64_t> out(v->array.size());
  for (size_t i = 0; i < v->array.size(); ++i) {
    if (!ToInt(v->array[i], &out[i])) {
      return InvalidArgumentError(path() + ": metadata key \"" + std::string(key) + "\" element " +
                                  std::to_string(i) + " holds uint64 " +
                                  std::to_string(v->array[i].u) + ", which does not fit int64");
    }
  }
  return out;
}

StatusOr<std::vector<float>> GgufFile::GetFloatArray(std::string_view key) const {
  MP_ASSIGN_OR_RETURN(const GgufValue* v, Lookup(*this, key));
  const T e = v->array_type;
  if (v->type != T::kArray || !(IsFloat(e) || IsSigned(e) || IsUnsigned(e))) {
    return Mistyped(*this, key, *v, "array of float32");
  }
  std::vector<float> out(v->array.size());
  for (size_t i = 0; i < v->array.size(); ++i) {
    double d = 0;
    ToFloat(v->array[i], &d);
    out[i] = static_cast<float>(d);
  }
  return out;
}

}  // namespace millipede
