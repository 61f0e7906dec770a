// Metadata values: scalars, strings and (nested) arrays.
#include <string>

#include "checkpoint/gguf_reader.h"

namespace millipede::gguf_internal {
namespace {

// Bytes the smallest value of `type` takes in the file.
uint64_t MinValueBytes(GgufValue::Type type) {
  switch (type) {
    case GgufValue::Type::kUint8:
    case GgufValue::Type::kInt8:
    case GgufValue::Type::kBool: return 1;
    case GgufValue::Type::kUint16:
    case GgufValue::Type::kInt16: return 2;
    case GgufValue::Type::kUint32:
    case GgufValue::Type::kInt32:
    case GgufValue::Type::kFloat32: return 4;
    case GgufValue::Type::kUint64:
    case GgufValue::Type::kInt64:
    case GgufValue::Type::kFloat64:
    case GgufValue::Type::kString: return 8;     // the length
    case GgufValue::Type::kArray: return 4 + 8;  // element type and count
  }
  return 1;
}

}  // namespace

bool IsKnownValueType(uint32_t raw) {
  return raw <= static_cast<uint32_t>(GgufValue::Type::kFloat64);
}

Status GgufReader::Need(uint64_t n, const std::string& where, const char* item) const {
  if (n <= left()) return OkStatus();
  return Bad(where + ": truncated: " + item + " at byte offset " + std::to_string(pos_) +
             " needs " + std::to_string(n) + " bytes, but the file has only " +
             std::to_string(left()) + " left");
}

Status GgufReader::CountValues(uint64_t n, const std::string& where) {
  if (n > kMaxMetadataValues - values_) {
    return Bad(where + ": " + std::to_string(n) + " more values take the file past the limit of " +
               std::to_string(kMaxMetadataValues) + " metadata values");
  }
  values_ += n;
  return OkStatus();
}

Status GgufReader::ReadString(std::string* s, const std::string& where, const char* item) {
  uint64_t len = 0;
  const uint64_t at = pos_;
  MP_RETURN_IF_ERROR(Read(&len, where, item));
  if (len > left()) {
    return Bad(where + ": " + item + " at byte offset " + std::to_string(at) + " claims " +
               std::to_string(len) + " bytes, but the file has only " + std::to_string(left()) +
               " left");
  }
  s->assign(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
  pos_ += len;
  return OkStatus();
}

Status GgufReader::ReadValue(GgufValue::Type type, int depth, GgufValue* out,
                             const std::string& where) {
  using T = GgufValue::Type;
  out->type = type;
  switch (type) {
    case T::kUint8: return ReadAs<uint8_t>(&out->u, where, "uint8 value");
    case T::kUint16: return ReadAs<uint16_t>(&out->u, where, "uint16 value");
    case T::kUint32: return ReadAs<uint32_t>(&out->u, where, "uint32 value");
    case T::kUint64: return ReadAs<uint64_t>(&out->u, where, "uint64 value");
    case T::kInt8: return ReadAs<int8_t>(&out->i, where, "int8 value");
    case T::kInt16: return ReadAs<int16_t>(&out->i, where, "int16 value");
    case T::kInt32: return ReadAs<int32_t>(&out->i, where, "int32 value");
    case T::kInt64: return ReadAs<int64_t>(&out->i, where, "int64 value");
    case T::kFloat32: return ReadAs<float>(&out->f, where, "float32 value");
    case T::kFloat64: return ReadAs<double>(&out->f, where, "float64 value");
    case T::kBool: {
      uint8_t v;
      MP_RETURN_IF_ERROR(Read(&v, where, "bool value"));
      if (v > 1) {
        return Bad(where + ": bool value " + std::to_string(v) + " at byte offset " +
                   std::to_string(pos_ - 1) + " is neither 0 nor 1");
      }
      out->u = v;
      break;
    }
    case T::kString: return ReadString(&out->s, where, "string value");
    case T::kArray: {
      if (depth >= kMaxArrayDepth) {
        return Bad(where + ": arrays nested more than " + std::to_string(kMaxArrayDepth) +
                   " deep (at byte offset " + std::to_string(pos_) + ")");
      }
      uint32_t raw_type = 0;
      MP_RETURN_IF_ERROR(Read(&raw_type, where, "array element type"));
      if (!IsKnownValueType(raw_type)) {
        return Bad(where + ": unknown array element type " + std::to_string(raw_type) +
                   " at byte offset " + std::to_string(pos_ - 4));
      }
      out->array_type = static_cast<T>(raw_type);
      uint64_t count = 0;
      const uint64_t at = pos_;
      MP_RETURN_IF_ERROR(Read(&count, where, "array length"));
      // Checked before anything is allocated for the elements.
      if (count > left() / MinValueBytes(out->array_type)) {
        return Bad(where + ": array of " + std::to_string(count) + " " +
                   GgufValueTypeName(out->array_type) + " elements at byte offset " +
                   std::to_string(at) + " cannot fit in the " + std::to_string(left()) +
                   " bytes left in the file");
      }
      MP_RETURN_IF_ERROR(CountValues(count, where));
      out->array.resize(static_cast<size_t>(count));
      for (GgufValue& element : out->array) {
        MP_RETURN_IF_ERROR(ReadValue(out->array_type, depth + 1, &element, where));
      }
      break;
    }
    default:
      return Bad(where + ": unknown value type " + std::to_string(static_cast<uint32_t>(type)));
  }
  return OkStatus();
}

}  // namespace millipede::gguf_internal
