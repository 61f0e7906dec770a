#include "kernels/memory/convert.h"

namespace millipede {

Status ConvertCheckArgs(ConstTensorView src, TensorView dst) {
  MP_REQUIRE(IsLoadableDType(src.dtype) && IsLoadableDType(dst.dtype),
             "convert: ", DTypeName(src.dtype), " -> ", DTypeName(dst.dtype),
             " is not a float conversion");
  MP_REQUIRE(src.NumElements() == dst.NumElements(), "convert: element counts differ (",
             src.shape.ToString(), " vs ", dst.shape.ToString(), ")");
  MP_REQUIRE(src.NumElements() == 0 || (src.data != nullptr && dst.data != nullptr),
             "convert: null data");
  return OkStatus();
}

Status ConvertRef(ConstTensorView src, TensorView dst) {
  MP_RETURN_IF_ERROR(ConvertCheckArgs(src, dst));
  return ConvertFloats(src.data, src.dtype, dst.data, dst.dtype,
                       static_cast<size_t>(src.NumElements()));
}

}  // namespace millipede
