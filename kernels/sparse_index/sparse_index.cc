#include "kernels/sparse_index/sparse_index.h"

#include <string>

namespace millipede {
namespace {

Status CheckRows3(ConstTensorView t, const std::string& what) {
  MP_REQUIRE(t.rank() == 2 && t.dim(1) == 3, what, ": shape ", t.shape.ToString(),
             ", expected [n, 3]");
  return CheckTensor(t, what.c_str(), DType::kI64, t.shape);
}

Status CheckOffsets(ConstTensorView t, int64_t items, const std::string& what) {
  return CheckTensor(t, what.c_str(), DType::kI64, Shape{items + 1});
}

}  // namespace

Status SparseTilesCheck(ConstTensorView tiles, const char* what) {
  return CheckRows3(tiles, std::string(what) + " tiles");
}

Status SparseRunsCheck(ConstTensorView runs, const char* what) {
  return CheckRows3(runs, std::string(what) + " runs");
}

Status SparseIndexCheck(const SparseIndexView& index, int64_t items, const char* what) {
  const std::string w(what);
  MP_RETURN_IF_ERROR(CheckOffsets(index.range_offsets, items, w + " range_offsets"));
  MP_RETURN_IF_ERROR(CheckOffsets(index.column_offsets, items, w + " column_offsets"));
  MP_RETURN_IF_ERROR(CheckRows3(index.ranges, w + " ranges"));
  MP_REQUIRE(index.columns.rank() == 2 && index.columns.dim(1) == 2, what, " columns: shape ",
             index.columns.shape.ToString(), ", expected [n, 2]");
  return CheckTensor(index.columns, (w + " columns").c_str(), DType::kI64, index.columns.shape);
}

Status SparseIndexOutCheck(const SparseIndexOut& out, int64_t items, const char* what) {
  const std::string w(what);
  MP_RETURN_IF_ERROR(CheckOffsets(AsConst(out.range_offsets), items, w + " range_offsets"));
  MP_RETURN_IF_ERROR(CheckOffsets(AsConst(out.column_offsets), items, w + " column_offsets"));
  if (out.CountPass()) return OkStatus();
  MP_REQUIRE(out.ranges.data != nullptr || out.ranges.NumElements() == 0, what,
             " ranges: null data outside the count pass");
  MP_RETURN_IF_ERROR(CheckRows3(AsConst(out.ranges), w + " ranges"));
  MP_REQUIRE(out.columns.rank() == 2 && out.columns.dim(1) == 2, what, " columns: shape ",
             out.columns.shape.ToString(), ", expected [n, 2]");
  return CheckTensor(AsConst(out.columns), (w + " columns").c_str(), DType::kI64,
                     out.columns.shape);
}

}  // namespace millipede
