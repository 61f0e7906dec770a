// A GGUF file (llama.cpp's model format, versions 2 and 3, little-endian): key/value metadata and
// tensors, memory-mapped. Layout: "GGUF", u32 version, u64 tensor count, u64 metadata count, the
// metadata (string key, u32 value type, value), the tensor infos (string name, u32 n_dims,
// u64 ne[n_dims] with ne[0] the innermost, u32 ggml type, u64 offset into the data section),
// then padding to `general.alignment` (default 32) and the data section.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/file_util.h"
#include "common/status.h"

namespace millipede {

// ggml's tensor types (the numbers are the file's). Only those listed are read.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30,
};

// "F32", "Q4_K", ... as ggml spells them.
const char* GgmlTypeName(GgmlType type);
// Elements per block and bytes per block of `type` (1 and the element size for F32/F16/BF16;
// 0 for a type not listed above). GgmlTypeName gives "unknown" for those.
int64_t GgmlBlockElements(GgmlType type);
int64_t GgmlBlockBytes(GgmlType type);

// One metadata value. Scalars keep their file type; arrays hold elements of one type (nested
// arrays allowed, as the format allows).
struct GgufValue {
  enum class Type : uint32_t {
    kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5, kFloat32 = 6,
    kBool = 7, kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11, kFloat64 = 12,
  };
  Type type = Type::kUint8;
  uint64_t u = 0;      // unsigned integers, bool (0/1)
  int64_t i = 0;       // signed integers
  double f = 0;        // float32 / float64
  std::string s;       // string
  Type array_type = Type::kUint8;  // element type of an array
  std::vector<GgufValue> array;
};

// "uint32", "string", "array", ... for messages.
const char* GgufValueTypeName(GgufValue::Type type);

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // ggml order: ne[0] is the innermost (contiguous) dimension
  GgmlType type = GgmlType::kF32;
  uint64_t offset = 0;      // from the start of the data section
  int64_t num_elements = 0;
  uint64_t num_bytes = 0;   // num_elements / block elements * block bytes
  const unsigned char* data = nullptr;  // into the mapped file
};

class GgufFile {
 public:
  GgufFile() = default;
  GgufFile(GgufFile&&) noexcept = default;
  GgufFile& operator=(GgufFile&&) noexcept = default;

  // Maps and validates the whole file: magic, version 2 or 3 (a byte-swapped version is a
  // big-endian file: refused), counts that fit the file, known value and tensor types, unique
  // keys and tensor names, at most 4 dimensions with positive sizes whose product does not
  // overflow, the innermost one a multiple of the type's block, general.alignment (if present,
  // a u32 power of two) respected by every offset, every tensor's bytes inside the file and no
  // two tensors overlapping. Errors are InvalidArgument naming the file and the offending key,
  // tensor or byte offset (NotFound if the file does not exist).
  static StatusOr<GgufFile> Open(const std::string& path);
  // The same checks over a GGUF image already in memory (`what` names it in errors and is what
  // path() returns); the tensors' data pointers point into `data`, which must outlive the result.
  static StatusOr<GgufFile> Parse(const unsigned char* data, size_t size, const std::string& what);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }

  // Metadata, in file order of keys.
  const std::vector<std::string>& keys() const { return keys_; }
  const GgufValue* Find(std::string_view key) const;
  // Typed reads; NotFound naming the key if absent, InvalidArgument naming the key and both
  // types if the stored type does not convert (integers of any width convert to each other when
  // the value fits; floats accept integers; GetBool only bool).
  StatusOr<std::string> GetString(std::string_view key) const;
  StatusOr<int64_t> GetInt(std::string_view key) const;
  StatusOr<double> GetFloat(std::string_view key) const;
  StatusOr<bool> GetBool(std::string_view key) const;
  StatusOr<std::vector<std::string>> GetStringArray(std::string_view key) const;
  StatusOr<std::vector<int64_t>> GetIntArray(std::string_view key) const;
  StatusOr<std::vector<float>> GetFloatArray(std::string_view key) const;

  // Tensors, in file order.
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(std::string_view name) const;

 private:
  MappedFile file_;  // empty when made by Parse
  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::vector<std::string> keys_;
  std::map<std::string, GgufValue, std::less<>> values_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace millipede
