// A bounds-checked cursor over a GGUF image and the decoder of its metadata values; internal to
// the checkpoint library (gguf.cc reads the file's structure with it).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "checkpoint/gguf.h"
#include "common/status.h"

namespace millipede::gguf_internal {

// Arrays inside arrays: real files nest none; a bound keeps the recursive reader's stack small.
inline constexpr int kMaxArrayDepth = 8;
// Metadata values (keys and array elements) one file may hold. Each costs about 100 bytes in
// memory however small it is in the file, so a hostile file of a few hundred MB of u8 arrays
// could otherwise ask for tens of GB. The largest real vocabularies (256K tokens, scores and
// types plus ~500K merges) stay well below this.
inline constexpr uint64_t kMaxMetadataValues = uint64_t{1} << 24;

bool IsKnownValueType(uint32_t raw);

// Reads little-endian fields in order. Every error is InvalidArgument naming the file (`what`),
// then `where` (the key or tensor being read: "metadata key \"a\""), the item and its byte offset.
class GgufReader {
 public:
  GgufReader(const unsigned char* data, uint64_t size, const std::string& what)
      : data_(data), size_(size), what_(what) {}

  const unsigned char* data() const { return data_; }
  uint64_t size() const { return size_; }
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }

  Status Bad(const std::string& problem) const {
    return InvalidArgumentError(what_ + ": " + problem);
  }
  // OK if `n` more bytes are left, else the truncation error.
  Status Need(uint64_t n, const std::string& where, const char* item) const;
  template <typename T>
  Status Read(T* v, const std::string& where, const char* item) {
    MP_RETURN_IF_ERROR(Need(sizeof(T), where, item));
    std::memcpy(v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return OkStatus();
  }
  // A u64 length and that many bytes; the length is checked against the bytes left first.
  Status ReadString(std::string* s, const std::string& where, const char* item);
  // A metadata value of `type` inside `depth` arrays. Array lengths are checked against the bytes
  // left and the metadata value budget before anything is allocated for them.
  Status ReadValue(GgufValue::Type type, int depth, GgufValue* out, const std::string& where);
  // Counts `n` values (the keys) against kMaxMetadataValues.
  Status CountValues(uint64_t n, const std::string& where);

 private:
  // A field of the file's type V into a wider *dst.
  template <typename V, typename Dst>
  Status ReadAs(Dst* dst, const std::string& where, const char* item) {
    V v;
    MP_RETURN_IF_ERROR(Read(&v, where, item));
    *dst = v;
    return OkStatus();
  }

  const unsigned char* data_;
  uint64_t size_;
  const std::string& what_;
  uint64_t pos_ = 0;
  uint64_t values_ = 0;
};

}  // namespace millipede::gguf_internal
