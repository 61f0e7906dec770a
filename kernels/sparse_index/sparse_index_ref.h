// Internal helpers of the index builders' CPU references (vertical_slash_index_ref.cc,
// block_sparse_index_ref.cc): reading query tiles and the key layout from host memory, placing
// position ranges into the key buffer, and writing the CSR index (sparse_index.h).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/sparse_index/sparse_index.h"

namespace millipede::sparse_index_ref {

// One query tile: positions [pos_first, pos_last] (inclusive).
struct Tile {
  int64_t pos_first = 0, pos_last = 0;
};

// The tiles of a host tensor, checked: rows in [1, kSparseTileRows], q_row_begin >= 0,
// pos_begin >= 0, no crossing of a multiple of kSparseTileRows in position.
StatusOr<std::vector<Tile>> ReadTiles(ConstTensorView tiles, const char* what);

// A key layout in host memory, checked: runs with 0 <= pos_begin <= pos_end, row_begin >= 0,
// sorted by position and disjoint.
class KeyLayout {
 public:
  static StatusOr<KeyLayout> Read(ConstTensorView runs, const char* what);

  // Appends (row_begin, row_end, pos_begin) pieces for positions [begin, end), one per run they
  // span. Positions no run holds are left out with skip_absent; otherwise Place returns false
  // and sets *missing to the first of them.
  bool Place(int64_t begin, int64_t end, bool skip_absent, std::vector<std::array<int64_t, 3>>* out,
             int64_t* missing) const;
  // The buffer row of `pos`, or -1 when no run holds it.
  int64_t Row(int64_t pos) const;

 private:
  std::vector<std::array<int64_t, 3>> runs_;  // (pos_begin, pos_end, row_begin)
  // Index of the first run whose pos_end > pos (runs_.size() if none).
  size_t FirstEndingAfter(int64_t pos) const;
};

// Places the positions of key blocks `blocks` (ascending) of `block` positions each, cut after
// `pos_last` (a tile's last position), adjacent blocks as one range, by `layout` into `out`;
// false (and *missing) at the first position the layout lacks, unless skip_absent.
bool PlaceBlocks(std::span<const int64_t> blocks, int64_t block, int64_t pos_last,
                 const KeyLayout& layout, bool skip_absent,
                 std::vector<std::array<int64_t, 3>>* out, int64_t* missing);

// The index being built on the host, one item after another in item order.
struct IndexBuilder {
  std::vector<int64_t> range_offsets{0}, column_offsets{0};
  std::vector<std::array<int64_t, 3>> ranges;
  std::vector<std::array<int64_t, 2>> columns;
  void EndItem() {
    range_offsets.push_back(static_cast<int64_t>(ranges.size()));
    column_offsets.push_back(static_cast<int64_t>(columns.size()));
  }
};

// Writes the offsets always and, outside the count pass, the ranges and columns, which must be
// sized exactly by the offsets' last entries.
Status WriteIndex(const IndexBuilder& index, const SparseIndexOut& out, const char* what);

}  // namespace millipede::sparse_index_ref
