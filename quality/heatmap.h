// Accuracy heatmaps as in the long-context papers' figures: context length across, needle depth
// (or chain step) down; each cell coloured from red (0% right) through yellow to green (100%),
// with a colour scale on the right and labels drawn in a small built-in bitmap font.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "quality/png.h"

namespace millipede {

struct HeatmapData {
  std::vector<std::string> x_labels;  // one per column (e.g. "1K"); digits, K, M, %, '.' and ' '
  std::vector<std::string> y_labels;  // one per row, top to bottom (e.g. "50%")
  std::vector<double> values;         // [rows][columns] accuracy in [0, 1]; NaN: no data (grey)
};

// Where things are drawn, so that tests can find each cell.
struct HeatmapLayout {
  static constexpr int kCellWidth = 48;
  static constexpr int kCellHeight = 24;
  static constexpr int kLeft = 48;    // y labels
  static constexpr int kTop = 8;
  static constexpr int kBottom = 24;  // x labels
  static constexpr int kBarGap = 12;
  static constexpr int kBarWidth = 16;
  static constexpr int kRight = 56;   // bar labels
  int columns = 0, rows = 0;
  int width() const { return kLeft + columns * kCellWidth + kBarGap + kBarWidth + kRight; }
  int height() const { return kTop + rows * kCellHeight + kBottom; }
  int CellCenterX(int column) const { return kLeft + column * kCellWidth + kCellWidth / 2; }
  int CellCenterY(int row) const { return kTop + row * kCellHeight + kCellHeight / 2; }
};

// The colour of an accuracy in [0, 1] (clamped): red -> yellow -> green.
void AccuracyColor(double accuracy, uint8_t rgb[3]);

// Draws the heatmap. InvalidArgument when values does not hold rows x columns entries.
StatusOr<RgbImage> RenderHeatmap(const HeatmapData& data);

}  // namespace millipede
