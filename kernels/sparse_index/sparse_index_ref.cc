#include "kernels/sparse_index/sparse_index_ref.h"

#include <algorithm>
#include <cstring>

namespace millipede::sparse_index_ref {

StatusOr<std::vector<Tile>> ReadTiles(ConstTensorView tiles, const char* what) {
  const int64_t* t = tiles.as<const int64_t>();
  std::vector<Tile> out;
  for (int64_t i = 0; i < tiles.dim(0); ++i) {
    const int64_t row_begin = t[3 * i], row_end = t[3 * i + 1], pos = t[3 * i + 2];
    const int64_t rows = row_end - row_begin;
    MP_REQUIRE(row_begin >= 0 && rows >= 1 && rows <= kSparseTileRows && pos >= 0, what, ": tile ",
               i, " (rows [", row_begin, ", ", row_end, ") at position ", pos, ") needs 1 to ",
               kSparseTileRows, " rows and non-negative rows and positions");
    MP_REQUIRE(pos / kSparseTileRows == (pos + rows - 1) / kSparseTileRows, what, ": tile ", i,
               " (positions ", pos, " to ", pos + rows - 1, ") crosses a multiple of ",
               kSparseTileRows);
    out.push_back({pos, pos + rows - 1});
  }
  return out;
}

StatusOr<KeyLayout> KeyLayout::Read(ConstTensorView runs, const char* what) {
  const int64_t* r = runs.as<const int64_t>();
  KeyLayout layout;
  for (int64_t i = 0; i < runs.dim(0); ++i) {
    const int64_t pos_begin = r[3 * i], pos_end = r[3 * i + 1], row_begin = r[3 * i + 2];
    MP_REQUIRE(pos_begin >= 0 && pos_end >= pos_begin && row_begin >= 0, what, ": run ", i,
               " (positions [", pos_begin, ", ", pos_end, ") at row ", row_begin, ") is malformed");
    MP_REQUIRE(i == 0 || pos_begin >= r[3 * (i - 1) + 1], what, ": run ", i, " at position ",
               pos_begin, " overlaps or precedes run ", i - 1);
    layout.runs_.push_back({pos_begin, pos_end, row_begin});
  }
  return layout;
}

size_t KeyLayout::FirstEndingAfter(int64_t pos) const {
  // pos_end is non-decreasing because runs are sorted and disjoint.
  return static_cast<size_t>(
      std::upper_bound(runs_.begin(), runs_.end(), pos,
                       [](int64_t p, const std::array<int64_t, 3>& run) { return p < run[1]; }) -
      runs_.begin());
}

int64_t KeyLayout::Row(int64_t pos) const {
  const size_t i = FirstEndingAfter(pos);
  if (i == runs_.size() || runs_[i][0] > pos) return -1;
  return runs_[i][2] + (pos - runs_[i][0]);
}

bool PlaceBlocks(std::span<const int64_t> blocks, int64_t block, int64_t pos_last,
                 const KeyLayout& layout, bool skip_absent,
                 std::vector<std::array<int64_t, 3>>* out, int64_t* missing) {
  int64_t begin = -1, end = -1;
  for (int64_t kb : blocks) {
    const int64_t b_begin = kb * block, b_end = std::min((kb + 1) * block, pos_last + 1);
    if (b_begin != end) {
      if (begin < end && !layout.Place(begin, end, skip_absent, out, missing)) return false;
      begin = b_begin;
    }
    end = b_end;
  }
  return begin >= end || layout.Place(begin, end, skip_absent, out, missing);
}

bool KeyLayout::Place(int64_t begin, int64_t end, bool skip_absent,
                      std::vector<std::array<int64_t, 3>>* out, int64_t* missing) const {
  for (size_t i = FirstEndingAfter(begin); begin < end; ++i) {
    if (i == runs_.size() || runs_[i][0] > begin) {
      if (!skip_absent) {
        *missing = begin;
        return false;
      }
      if (i == runs_.size() || runs_[i][0] >= end) return true;
      begin = runs_[i][0];
    }
    const int64_t piece_end = std::min(end, runs_[i][1]);
    const int64_t row = runs_[i][2] + (begin - runs_[i][0]);
    if (piece_end > begin) out->push_back({row, row + (piece_end - begin), begin});
    begin = piece_end;
  }
  return true;
}

Status WriteIndex(const IndexBuilder& index, const SparseIndexOut& out, const char* what) {
  MP_RETURN_IF_ERROR(
      SparseIndexOutCheck(out, static_cast<int64_t>(index.range_offsets.size()) - 1, what));
  std::copy(index.range_offsets.begin(), index.range_offsets.end(),
            out.range_offsets.as<int64_t>());
  std::copy(index.column_offsets.begin(), index.column_offsets.end(),
            out.column_offsets.as<int64_t>());
  if (out.CountPass()) return OkStatus();
  const int64_t n_ranges = static_cast<int64_t>(index.ranges.size());
  const int64_t n_columns = static_cast<int64_t>(index.columns.size());
  MP_REQUIRE(out.ranges.dim(0) == n_ranges && out.columns.dim(0) == n_columns, what,
             ": ranges and columns sized ", out.ranges.dim(0), " and ", out.columns.dim(0),
             ", but the index has ", n_ranges, " and ", n_columns, " (sizes from the count pass)");
  if (n_ranges > 0) std::memcpy(out.ranges.data, index.ranges.data(), n_ranges * 3 * 8);
  if (n_columns > 0) std::memcpy(out.columns.data, index.columns.data(), n_columns * 2 * 8);
  return OkStatus();
}

}  // namespace millipede::sparse_index_ref
