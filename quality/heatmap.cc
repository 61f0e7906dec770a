#include "quality/heatmap.h"

#include <algorithm>
#include <cmath>

namespace millipede {
namespace {

// 3x5 glyphs, one row per entry, bit 2 = leftmost pixel.
struct Glyph {
  char c;
  uint8_t rows[5];
};
constexpr Glyph kFont[] = {
    {'0', {7, 5, 5, 5, 7}}, {'1', {2, 6, 2, 2, 7}}, {'2', {7, 1, 7, 4, 7}},
    {'3', {7, 1, 7, 1, 7}}, {'4', {5, 5, 7, 1, 1}}, {'5', {7, 4, 7, 1, 7}},
    {'6', {7, 4, 7, 5, 7}}, {'7', {7, 1, 1, 2, 2}}, {'8', {7, 5, 7, 5, 7}},
    {'9', {7, 5, 7, 1, 7}}, {'K', {5, 5, 6, 5, 5}}, {'M', {5, 7, 7, 5, 5}},
    {'%', {5, 1, 2, 4, 5}}, {'.', {0, 0, 0, 0, 2}}, {'-', {0, 0, 7, 0, 0}},
};
constexpr int kScale = 2;                      // each font pixel is 2x2
constexpr int kAdvance = 4 * kScale;           // glyph width + 1 column of space
constexpr int kGlyphHeight = 5 * kScale;

int TextWidth(const std::string& s) { return static_cast<int>(s.size()) * kAdvance - kScale; }

void DrawText(RgbImage& img, int x, int y, const std::string& s) {
  for (char c : s) {
    for (const Glyph& g : kFont) {
      if (g.c != c) continue;
      for (int r = 0; r < 5; ++r)
        for (int col = 0; col < 3; ++col)
          if (g.rows[r] & (4 >> col))
            img.FillRect(x + col * kScale, y + r * kScale, x + (col + 1) * kScale,
                         y + (r + 1) * kScale, 0, 0, 0);
    }
    x += kAdvance;  // unknown characters (and ' ') leave a gap
  }
}

}  // namespace

void AccuracyColor(double accuracy, uint8_t rgb[3]) {
  const double a = std::clamp(std::isnan(accuracy) ? 0.0 : accuracy, 0.0, 1.0);
  static constexpr double kRed[3] = {215, 48, 39}, kYellow[3] = {254, 224, 100},
                          kGreen[3] = {26, 152, 80};
  const double* from = a < 0.5 ? kRed : kYellow;
  const double* to = a < 0.5 ? kYellow : kGreen;
  const double t = a < 0.5 ? a * 2 : (a - 0.5) * 2;
  for (int i = 0; i < 3; ++i)
    rgb[i] = static_cast<uint8_t>(std::lround(from[i] + (to[i] - from[i]) * t));
}

StatusOr<RgbImage> RenderHeatmap(const HeatmapData& data) {
  HeatmapLayout L;
  L.columns = static_cast<int>(data.x_labels.size());
  L.rows = static_cast<int>(data.y_labels.size());
  MP_REQUIRE(L.columns >= 1 && L.rows >= 1 && L.columns <= 4096 && L.rows <= 4096,
             "heatmap: ", L.columns, " columns x ", L.rows, " rows");
  MP_REQUIRE(data.values.size() == static_cast<size_t>(L.columns) * L.rows, "heatmap: ",
             data.values.size(), " values for ", L.rows, " x ", L.columns, " cells");
  RgbImage img(L.width(), L.height(), 255, 255, 255);
  uint8_t c[3];
  for (int r = 0; r < L.rows; ++r) {
    for (int col = 0; col < L.columns; ++col) {
      const double v = data.values[static_cast<size_t>(r) * L.columns + col];
      if (std::isnan(v)) {
        c[0] = c[1] = c[2] = 200;
      } else {
        AccuracyColor(v, c);
      }
      const int x0 = HeatmapLayout::kLeft + col * HeatmapLayout::kCellWidth;
      const int y0 = HeatmapLayout::kTop + r * HeatmapLayout::kCellHeight;
      // A 1-pixel white grid between cells.
      img.FillRect(x0 + 1, y0 + 1, x0 + HeatmapLayout::kCellWidth,
                   y0 + HeatmapLayout::kCellHeight, c[0], c[1], c[2]);
    }
    DrawText(img, HeatmapLayout::kLeft - 4 - TextWidth(data.y_labels[r]),
             L.CellCenterY(r) - kGlyphHeight / 2, data.y_labels[r]);
  }
  const int grid_bottom = HeatmapLayout::kTop + L.rows * HeatmapLayout::kCellHeight;
  for (int col = 0; col < L.columns; ++col)
    DrawText(img, L.CellCenterX(col) - TextWidth(data.x_labels[col]) / 2, grid_bottom + 6,
             data.x_labels[col]);
  // The colour scale: 100% at the top, 0% at the bottom.
  const int bar_x = HeatmapLayout::kLeft + L.columns * HeatmapLayout::kCellWidth +
                    HeatmapLayout::kBarGap;
  const int bar_h = grid_bottom - HeatmapLayout::kTop;
  for (int y = 0; y < bar_h; ++y) {
    AccuracyColor(1.0 - static_cast<double>(y) / std::max(1, bar_h - 1), c);
    img.FillRect(bar_x, HeatmapLayout::kTop + y, bar_x + HeatmapLayout::kBarWidth,
                 HeatmapLayout::kTop + y + 1, c[0], c[1], c[2]);
  }
  DrawText(img, bar_x + HeatmapLayout::kBarWidth + 4, HeatmapLayout::kTop, "100%");
  DrawText(img, bar_x + HeatmapLayout::kBarWidth + 4, grid_bottom - kGlyphHeight, "0%");
  return img;
}

}  // namespace millipede
