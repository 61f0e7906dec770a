#include <cstring>

#include "kernels/memory/gather_rows.h"

namespace millipede {
namespace {

int64_t RowElements(const Shape& shape) {
  int64_t elements = 1;
  for (int i = 1; i < shape.rank; ++i) elements *= shape[i];
  return elements;
}

int64_t IndexAt(const ConstTensorView& index, int64_t i) {
  return index.dtype == DType::kI32 ? index.as<const int32_t>()[i] : index.as<const int64_t>()[i];
}

}  // namespace

Status GatherRowsCheckArgs(const GatherRowsArgs& args) {
  MP_REQUIRE(args.src.rank() >= 1, "gather_rows src: rank 0, expected >= 1");
  MP_REQUIRE(args.dst.rank() >= 1, "gather_rows dst: rank 0, expected >= 1");
  MP_RETURN_IF_ERROR(CheckedNumBytes(args.src.shape, args.src.dtype).status());
  MP_RETURN_IF_ERROR(CheckedNumBytes(args.dst.shape, args.dst.dtype).status());
  MP_REQUIRE(args.index.dtype == DType::kI32 || args.index.dtype == DType::kI64,
             "gather_rows index: dtype ", DTypeName(args.index.dtype), ", expected I32 or I64");
  MP_REQUIRE(args.index.rank() == 1, "gather_rows index: shape ", args.index.shape.ToString(),
             ", expected [m]");
  MP_REQUIRE(args.dst.dtype == args.src.dtype, "gather_rows: dst dtype ", DTypeName(args.dst.dtype),
             " differs from src dtype ", DTypeName(args.src.dtype));
  MP_REQUIRE(args.dst.dim(0) == args.index.dim(0), "gather_rows: dst has ", args.dst.dim(0),
             " rows for ", args.index.dim(0), " indices");
  MP_REQUIRE(RowElements(args.dst.shape) == RowElements(args.src.shape), "gather_rows: dst rows ",
             args.dst.shape.ToString(), " and src rows ", args.src.shape.ToString(),
             " differ in size");
  return OkStatus();
}

Status GatherRowsRef(const GatherRowsArgs& args) {
  MP_RETURN_IF_ERROR(GatherRowsCheckArgs(args));
  const int64_t n = args.src.dim(0), m = args.index.dim(0);
  for (int64_t i = 0; i < m; ++i) {
    const int64_t row = IndexAt(args.index, i);
    if (row < 0 || row >= n)
      return OutOfRangeError(detail::StrCat("gather_rows: index[", i, "] = ", row,
                                            " is outside the ", n, " source rows"));
  }
  const size_t row_bytes =
      static_cast<size_t>(RowElements(args.src.shape)) * DTypeSize(args.src.dtype);
  const char* src = static_cast<const char*>(args.src.data);
  char* dst = static_cast<char*>(args.dst.data);
  for (int64_t i = 0; i < m; ++i)
    std::memcpy(dst + i * row_bytes, src + IndexAt(args.index, i) * row_bytes, row_bytes);
  return OkStatus();
}

}  // namespace millipede
