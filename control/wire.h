// A minimal binary encoding for control-plane messages: little-endian fixed-size fields, strings
// and vectors prefixed with their length. Both ends are built from the same source, so there is
// no versioning; readers check every length against the bytes left.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "common/status.h"

namespace millipede::control {

class ByteWriter {
 public:
  template <typename T>
  void Put(T value) {
    static_assert(std::is_trivially_copyable_v<T>);
    const char* p = reinterpret_cast<const char*>(&value);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
  }
  void PutString(const std::string& s);
  template <typename T>
  void PutVector(const std::vector<T>& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    Put<uint64_t>(v.size());
    const char* p = reinterpret_cast<const char*>(v.data());
    bytes_.insert(bytes_.end(), p, p + v.size() * sizeof(T));
  }
  std::vector<char> Take() { return std::move(bytes_); }

 private:
  std::vector<char> bytes_;
};

class ByteReader {
 public:
  ByteReader(const char* data, size_t size) : data_(data), size_(size) {}
  explicit ByteReader(const std::vector<char>& bytes) : ByteReader(bytes.data(), bytes.size()) {}

  template <typename T>
  Status Get(T* value) {
    static_assert(std::is_trivially_copyable_v<T>);
    MP_RETURN_IF_ERROR(Need(sizeof(T)));
    std::memcpy(value, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return OkStatus();
  }
  Status GetString(std::string* s);
  template <typename T>
  Status GetVector(std::vector<T>* v) {
    uint64_t n = 0;
    MP_RETURN_IF_ERROR(Get(&n));
    MP_RETURN_IF_ERROR(Need(n, sizeof(T)));
    v->resize(n);
    if (n > 0) std::memcpy(v->data(), data_ + pos_, n * sizeof(T));
    pos_ += n * sizeof(T);
    return OkStatus();
  }
  // InvalidArgument unless every byte was read.
  Status ExpectEnd() const;

 private:
  // InvalidArgument unless `count` items of `size` bytes remain.
  Status Need(uint64_t count, size_t size = 1) const;

  const char* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace millipede::control
