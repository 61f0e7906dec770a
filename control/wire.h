// A minimal binary encoding for control-plane messages: little-endian fixed-size fields, strings
// and vectors prefixed with their length. Both ends are built from the same source, so there is
// no versioning; readers check every length against the bytes left.
//
// Each message's fields are described once, by a function template that both ends visit:
//   template <class Io, MessageOf<Foo> M>
//   void Fields(Io& io, M& m) {
//     io.Field(m.id);
//     io.Enum(m.kind, Kind::kA, Kind::kC);
//     io.List(m.parts, [&](auto& part) { Fields(io, part); });
//   }
// ByteWriter appends the fields of a const message; ByteReader fills a message from bytes and,
// after its first error (a truncated message, an out-of-range value), reads nothing more and
// keeps that error for Finish().
#pragma once

#include <concepts>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "common/status.h"

namespace millipede::control {

// M is T or const T: one Fields() template serves the writer (const) and the reader.
template <class M, class T>
concept MessageOf = std::same_as<std::remove_const_t<M>, T>;

namespace wire_internal {
template <class T>
struct IsVector : std::false_type {};
template <class T>
struct IsVector<std::vector<T>> : std::true_type {};

// A fixed-size field: copied as its bytes. Enums go through Enum() so that readers check them,
// bools are one byte that must be 0 or 1.
template <class T>
constexpr bool kPlain = std::is_trivially_copyable_v<T> && !std::is_enum_v<T> &&
                        !std::is_same_v<T, bool> && !std::is_pointer_v<T>;
}  // namespace wire_internal

class ByteWriter {
 public:
  // A fixed-size value, a bool, a std::string, or a std::vector of fixed-size values.
  template <class T>
  void Field(const T& value) {
    if constexpr (std::is_same_v<T, bool>) {
      Put<uint8_t>(value ? 1 : 0);
    } else if constexpr (std::is_same_v<T, std::string>) {
      PutBytes(value.data(), value.size(), 1);
    } else if constexpr (wire_internal::IsVector<T>::value) {
      static_assert(wire_internal::kPlain<typename T::value_type>,
                    "a vector of enums or structs goes through List()");
      PutBytes(value.data(), value.size(), sizeof(typename T::value_type));
    } else {
      static_assert(wire_internal::kPlain<T>, "enums go through Enum(), structs through Fields()");
      Put(value);
    }
  }
  // An enum whose values run from `first` to `last`.
  template <class E>
  void Enum(const E& value, E /*first*/, E /*last*/) {
    static_assert(std::is_enum_v<E>);
    Put(static_cast<std::underlying_type_t<E>>(value));
  }
  // A list of elements, each written by `each(element)`.
  template <class T, class Each>
  void List(const std::vector<T>& items, Each each) {
    Put<uint64_t>(items.size());
    for (const T& item : items) each(item);
  }
  // A presence byte, then the value written by `each(value)`.
  template <class T, class Each>
  void Optional(const std::optional<T>& value, Each each) {
    Field(value.has_value());
    if (value) each(*value);
  }
  std::vector<char> Take() { return std::move(bytes_); }

 private:
  template <class T>
  void Put(T value) {
    Append(&value, sizeof(T));
  }
  void PutBytes(const void* data, size_t count, size_t size);
  // Out of line: GCC 12 reports false buffer overflows when many inlined appends meet.
  void Append(const void* data, size_t size);

  std::vector<char> bytes_;
};

class ByteReader {
 public:
  explicit ByteReader(const std::vector<char>& bytes) : data_(bytes.data()), size_(bytes.size()) {}

  template <class T>
  void Field(T& value) {
    if constexpr (std::is_same_v<T, bool>) {
      uint8_t b = 0;
      Get(&b);
      Check(b <= 1, "a bool field holds ", int{b});
      value = b != 0;
    } else if constexpr (std::is_same_v<T, std::string>) {
      uint64_t n = 0;
      if (!Get(&n) || !Need(n, 1)) return;
      value.assign(data_ + pos_, n);
      pos_ += n;
    } else if constexpr (wire_internal::IsVector<T>::value) {
      using V = typename T::value_type;
      static_assert(wire_internal::kPlain<V>, "a vector of enums or structs goes through List()");
      uint64_t n = 0;
      if (!Get(&n) || !Need(n, sizeof(V))) return;
      value.resize(n);
      if (n > 0) std::memcpy(value.data(), data_ + pos_, n * sizeof(V));
      pos_ += n * sizeof(V);
    } else {
      static_assert(wire_internal::kPlain<T>, "enums go through Enum(), structs through Fields()");
      Get(&value);
    }
  }
  template <class E>
  void Enum(E& value, E first, E last) {
    static_assert(std::is_enum_v<E>);
    using U = std::underlying_type_t<E>;
    U raw{};
    if (!Get(&raw)) return;
    if (!Check(raw >= static_cast<U>(first) && raw <= static_cast<U>(last), "an enum field holds ",
               static_cast<int64_t>(raw), ", outside [", static_cast<int64_t>(first), ", ",
               static_cast<int64_t>(last), "]"))
      return;
    value = static_cast<E>(raw);
  }
  // Every element of a list takes at least one byte, so a count beyond the bytes left is refused
  // before anything is allocated.
  template <class T, class Each>
  void List(std::vector<T>& items, Each each) {
    uint64_t n = 0;
    if (!Get(&n) || !Need(n, 1)) return;
    items.assign(n, T{});
    for (T& item : items) {
      if (!status_.ok()) return;
      each(item);
    }
  }
  template <class T, class Each>
  void Optional(std::optional<T>& value, Each each) {
    bool present = false;
    Field(present);
    value.reset();
    if (!status_.ok() || !present) return;
    value.emplace();
    each(*value);
  }
  // The first error, or InvalidArgument unless every byte was read.
  Status Finish() const;

 private:
  template <class T>
  bool Get(T* value) {
    if (!Need(1, sizeof(T))) return false;
    std::memcpy(value, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  // False (keeping the error) unless `count` items of `size` bytes remain and no error came
  // before.
  bool Need(uint64_t count, size_t size);
  template <class... Args>
  bool Check(bool ok, const Args&... args) {
    if (!ok && status_.ok())
      status_ = InvalidArgumentError(detail::StrCat("control message: ", args...));
    return ok && status_.ok();
  }

  const char* data_;
  size_t size_;
  size_t pos_ = 0;
  Status status_;
};

}  // namespace millipede::control
