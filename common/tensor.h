// Non-owning tensor views (row-major, contiguous) and an owning host buffer.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"

namespace millipede {

inline constexpr int kMaxTensorRank = 6;

// A shape of up to kMaxTensorRank dimensions.
struct Shape {
  int rank = 0;
  std::array<int64_t, kMaxTensorRank> dims{};

  Shape() = default;
  Shape(std::initializer_list<int64_t> d);
  static StatusOr<Shape> FromVector(const std::vector<int64_t>& d);

  int64_t operator[](int i) const { return dims[i]; }
  int64_t NumElements() const;
  bool operator==(const Shape& other) const;
  std::string ToString() const;  // "[2, 3, 4]"
};

// A view of contiguous memory (host or device: the view does not know which).
template <typename Ptr>
struct BasicTensorView {
  Ptr data = nullptr;
  DType dtype = DType::kF32;
  Shape shape;

  int64_t NumElements() const { return shape.NumElements(); }
  size_t NumBytes() const { return static_cast<size_t>(NumElements()) * DTypeSize(dtype); }
  int64_t dim(int i) const { return shape.dims[i]; }
  int rank() const { return shape.rank; }
  template <typename T>
  T* as() const { return static_cast<T*>(data); }
};
using TensorView = BasicTensorView<void*>;
using ConstTensorView = BasicTensorView<const void*>;

inline ConstTensorView AsConst(const TensorView& t) { return {t.data, t.dtype, t.shape}; }

// Rows [begin, begin + count) of dimension 0 (the view must be contiguous, as all views are).
template <typename Ptr>
BasicTensorView<Ptr> SliceRows(const BasicTensorView<Ptr>& t, int64_t begin, int64_t count) {
  BasicTensorView<Ptr> out = t;
  int64_t row_elems = t.shape.rank > 0 && t.shape.dims[0] > 0 ? t.NumElements() / t.shape.dims[0]
                                                              : 0;
  using Byte = std::conditional_t<std::is_const_v<std::remove_pointer_t<Ptr>>, const char, char>;
  out.data = static_cast<Byte*>(t.data) + begin * row_elems * static_cast<int64_t>(DTypeSize(t.dtype));
  out.shape.dims[0] = count;
  return out;
}
// The same memory seen with another shape of the same element count.
template <typename Ptr>
StatusOr<BasicTensorView<Ptr>> Reshape(const BasicTensorView<Ptr>& t, const Shape& shape) {
  if (shape.NumElements() != t.NumElements())
    return InvalidArgumentError("cannot reshape " + t.shape.ToString() + " to " + shape.ToString());
  BasicTensorView<Ptr> out = t;
  out.shape = shape;
  return out;
}

// `shape` elements of `t` starting at element `offset` of its flat contents (e.g. one of several
// matrices stored back to back in one buffer). Past the end of `t`: InvalidArgument.
template <typename Ptr>
StatusOr<BasicTensorView<Ptr>> SubView(const BasicTensorView<Ptr>& t, int64_t offset,
                                       const Shape& shape) {
  if (offset < 0 || shape.NumElements() < 0 || offset + shape.NumElements() > t.NumElements())
    return InvalidArgumentError("a view of " + shape.ToString() + " at element " +
                                std::to_string(offset) + " is outside " + t.shape.ToString());
  using Byte = std::conditional_t<std::is_const_v<std::remove_pointer_t<Ptr>>, const char, char>;
  BasicTensorView<Ptr> out = t;
  out.data = static_cast<Byte*>(t.data) + offset * static_cast<int64_t>(DTypeSize(t.dtype));
  out.shape = shape;
  return out;
}

// shape.NumElements() * DTypeSize(dtype) with every product overflow-checked (sizes may come
// from files and requests); negative dimensions are errors.
StatusOr<size_t> CheckedNumBytes(const Shape& shape, DType dtype);

// Checks a view's dtype and shape; `what` names the argument in the error.
Status CheckTensor(const ConstTensorView& t, const char* what, DType dtype, const Shape& shape);
Status CheckTensor(const TensorView& t, const char* what, DType dtype, const Shape& shape);
// Checks only the rank and the dtype being a float type.
Status CheckFloatTensor(const ConstTensorView& t, const char* what, int rank);

// Owning host tensor (64-byte aligned).
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, const Shape& shape);
  HostTensor(HostTensor&&) noexcept = default;
  HostTensor& operator=(HostTensor&&) noexcept = default;
  HostTensor(const HostTensor&) = delete;
  HostTensor& operator=(const HostTensor&) = delete;

  TensorView view() { return {storage_.data(), dtype_, shape_}; }
  ConstTensorView view() const { return {storage_.data(), dtype_, shape_}; }
  template <typename T>
  T* data() { return reinterpret_cast<T*>(storage_.data()); }
  template <typename T>
  const T* data() const { return reinterpret_cast<const T*>(storage_.data()); }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t NumElements() const { return shape_.NumElements(); }
  size_t NumBytes() const { return static_cast<size_t>(NumElements()) * DTypeSize(dtype_); }

 private:
  struct alignas(64) Block {
    unsigned char bytes[64];
  };
  // Storage in 64-byte blocks keeps the data aligned for vector loads.
  struct Storage {
    std::vector<Block> blocks;
    void* data() { return blocks.data(); }
    const void* data() const { return blocks.data(); }
  } storage_;
  DType dtype_ = DType::kF32;
  Shape shape_;
};

}  // namespace millipede
