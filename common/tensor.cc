#include "common/tensor.h"

#include <sstream>

#include "common/checked_math.h"

namespace millipede {

Shape::Shape(std::initializer_list<int64_t> d) {
  for (int64_t x : d) {
    if (rank < kMaxTensorRank) dims[rank++] = x;
  }
}

StatusOr<Shape> Shape::FromVector(const std::vector<int64_t>& d) {
  if (d.size() > static_cast<size_t>(kMaxTensorRank))
    return InvalidArgumentError("tensor rank " + std::to_string(d.size()) + " exceeds " +
                                std::to_string(kMaxTensorRank));
  Shape s;
  for (int64_t x : d) s.dims[s.rank++] = x;
  return s;
}

int64_t Shape::NumElements() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= dims[i];
  return n;
}

bool Shape::operator==(const Shape& other) const {
  if (rank != other.rank) return false;
  for (int i = 0; i < rank; ++i)
    if (dims[i] != other.dims[i]) return false;
  return true;
}

std::string Shape::ToString() const {
  std::ostringstream out;
  out << '[';
  for (int i = 0; i < rank; ++i) out << (i ? ", " : "") << dims[i];
  out << ']';
  return out.str();
}

StatusOr<size_t> CheckedNumBytes(const Shape& shape, DType dtype) {
  uint64_t bytes = DTypeSize(dtype);
  for (int i = 0; i < shape.rank; ++i) {
    if (shape.dims[i] < 0)
      return InvalidArgumentError("negative dimension in shape " + shape.ToString());
    if (!CheckedMul(bytes, static_cast<uint64_t>(shape.dims[i]), &bytes))
      return OutOfRangeError("a tensor of shape " + shape.ToString() + " and dtype " +
                             DTypeName(dtype) + " is too large to address");
  }
  return static_cast<size_t>(bytes);
}

Status CheckTensor(const ConstTensorView& t, const char* what, DType dtype, const Shape& shape) {
  MP_REQUIRE(t.data != nullptr || shape.NumElements() == 0, what, ": null data");
  MP_REQUIRE(t.dtype == dtype, what, ": dtype ", DTypeName(t.dtype), ", expected ",
             DTypeName(dtype));
  MP_REQUIRE(t.shape == shape, what, ": shape ", t.shape.ToString(), ", expected ",
             shape.ToString());
  return OkStatus();
}

Status CheckTensor(const TensorView& t, const char* what, DType dtype, const Shape& shape) {
  return CheckTensor(AsConst(t), what, dtype, shape);
}

Status CheckFloatTensor(const ConstTensorView& t, const char* what, int rank) {
  MP_REQUIRE(t.data != nullptr || t.NumElements() == 0, what, ": null data");
  MP_REQUIRE(IsFloatDType(t.dtype), what, ": dtype ", DTypeName(t.dtype), " is not a float type");
  MP_REQUIRE(t.shape.rank == rank, what, ": rank ", t.shape.rank, ", expected ", rank);
  return OkStatus();
}

HostTensor::HostTensor(DType dtype, const Shape& shape) : dtype_(dtype), shape_(shape) {
  size_t bytes = static_cast<size_t>(shape.NumElements()) * DTypeSize(dtype);
  storage_.blocks.resize((bytes + sizeof(Block) - 1) / sizeof(Block));
}

}  // namespace millipede
