// The names and block sizes of ggml's tensor types and the names of GGUF's value types.
#include <cstdint>

#include "checkpoint/gguf.h"

namespace millipede {
namespace {

struct GgmlTypeTraits {
  GgmlType type;
  const char* name;
  int64_t block_elements;
  int64_t block_bytes;
};

constexpr GgmlTypeTraits kGgmlTypes[] = {
    {GgmlType::kF32, "F32", 1, 4},       {GgmlType::kF16, "F16", 1, 2},
    {GgmlType::kQ4_0, "Q4_0", 32, 18},   {GgmlType::kQ4_1, "Q4_1", 32, 20},
    {GgmlType::kQ5_0, "Q5_0", 32, 22},   {GgmlType::kQ5_1, "Q5_1", 32, 24},
    {GgmlType::kQ8_0, "Q8_0", 32, 34},   {GgmlType::kQ2_K, "Q2_K", 256, 84},
    {GgmlType::kQ3_K, "Q3_K", 256, 110}, {GgmlType::kQ4_K, "Q4_K", 256, 144},
    {GgmlType::kQ5_K, "Q5_K", 256, 176}, {GgmlType::kQ6_K, "Q6_K", 256, 210},
    {GgmlType::kBF16, "BF16", 1, 2},
};

const GgmlTypeTraits* FindGgmlType(uint32_t raw) {
  for (const GgmlTypeTraits& t : kGgmlTypes) {
    if (static_cast<uint32_t>(t.type) == raw) return &t;
  }
  return nullptr;
}

}  // namespace

const char* GgmlTypeName(GgmlType type) {
  const GgmlTypeTraits* t = FindGgmlType(static_cast<uint32_t>(type));
  return t == nullptr ? "unknown" : t->name;
}

int64_t GgmlBlockElements(GgmlType type) {
  const GgmlTypeTraits* t = FindGgmlType(static_cast<uint32_t>(type));
  return t == nullptr ? 0 : t->block_elements;
}

int64_t GgmlBlockBytes(GgmlType type) {
  const GgmlTypeTraits* t = FindGgmlType(static_cast<uint32_t>(type));
  return t == nullptr ? 0 : t->block_bytes;
}

const char* GgufValueTypeName(GgufValue::Type type) {
  switch (type) {
    case GgufValue::Type::kUint8: return "uint8";
    case GgufValue::Type::kInt8: return "int8";
    case GgufValue::Type::kUint16: return "uint16";
    case GgufValue::Type::kInt16: return "int16";
    case GgufValue::Type::kUint32: return "uint32";
    case GgufValue::Type::kInt32: return "int32";
    case GgufValue::Type::kFloat32: return "float32";
    case GgufValue::Type::kBool: return "bool";
    case GgufValue::Type::kString: return "string";
    case GgufValue::Type::kArray: return "array";
    case GgufValue::Type::kUint64: return "uint64";
    case GgufValue::Type::kInt64: return "int64";
    case GgufValue::Type::kFloat64: return "float64";
  }
  return "unknown";
}

}  // namespace millipede
