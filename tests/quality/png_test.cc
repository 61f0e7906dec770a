// The PNG encoder and the heatmaps, checked by decoding the files independently: chunk layout and
// CRCs, zlib inflate of IDAT, filter bytes, and the pixels.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>
#include <limits>

#include "quality/heatmap.h"
#include "quality/png.h"
#include "quality/report.h"

namespace millipede {
namespace {

uint32_t BigEndian32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v = v << 8 | static_cast<uint8_t>(s[at + i]);
  return v;
}

// Decodes an 8-bit RGB, non-interlaced PNG with filter 0 on every row (what EncodePng writes).
RgbImage DecodePng(const std::string& png) {
  RgbImage img;
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  std::string idat;
  size_t at = 8;
  bool ended = false;
  while (at + 12 <= png.size()) {
    const uint32_t length = BigEndian32(png, at);
    const std::string type = png.substr(at + 4, 4);
    const std::string body = png.substr(at + 4, 4 + length);
    const uint32_t crc = BigEndian32(png, at + 8 + length);
    EXPECT_EQ(crc, crc32(0, reinterpret_cast<const Bytef*>(body.data()),
                         static_cast<uInt>(body.size())))
        << type;
    const std::string data = body.substr(4);
    if (type == "IHDR") {
      img.width = static_cast<int>(BigEndian32(data, 0));
      img.height = static_cast<int>(BigEndian32(data, 4));
      EXPECT_EQ(data.substr(8), std::string("\x08\x02\x00\x00\x00", 5));
    } else if (type == "IDAT") {
      idat += data;
    } else if (type == "IEND") {
      ended = true;
    }
    at += 12 + length;
  }
  EXPECT_TRUE(ended);
  EXPECT_EQ(at, png.size());
  const size_t row = 3 * static_cast<size_t>(img.width);
  std::string raw((row + 1) * img.height, '\0');
  uLongf raw_size = raw.size();
  EXPECT_EQ(uncompress(reinterpret_cast<Bytef*>(raw.data()), &raw_size,
                       reinterpret_cast<const Bytef*>(idat.data()), idat.size()),
            Z_OK);
  EXPECT_EQ(raw_size, raw.size());
  for (int y = 0; y < img.height; ++y) {
    EXPECT_EQ(raw[y * (row + 1)], 0);
    img.rgb.insert(img.rgb.end(), raw.begin() + y * (row + 1) + 1,
                   raw.begin() + (y + 1) * (row + 1));
  }
  return img;
}

TEST(PngTest, RoundTripsEveryPixel) {
  RgbImage img(37, 11, 0, 0, 0);
  for (int y = 0; y < img.height; ++y)
    for (int x = 0; x < img.width; ++x)
      img.Set(x, y, static_cast<uint8_t>(x * 7 + y), static_cast<uint8_t>(y * 23),
              static_cast<uint8_t>(x ^ y));
  auto png = EncodePng(img);
  ASSERT_TRUE(png.ok());
  const RgbImage back = DecodePng(*png);
  EXPECT_EQ(back.width, 37);
  EXPECT_EQ(back.height, 11);
  EXPECT_EQ(back.rgb, img.rgb);
}

TEST(PngTest, RejectsBadImages) {
  RgbImage empty;
  EXPECT_FALSE(EncodePng(empty).ok());
  RgbImage short_pixels(4, 4, 1, 2, 3);
  short_pixels.rgb.pop_back();
  EXPECT_FALSE(EncodePng(short_pixels).ok());
}

TEST(HeatmapTest, CellsHaveTheirAccuracyColour) {
  HeatmapData data;
  data.x_labels = {"1K", "8K", "1M"};
  data.y_labels = {"0%", "50%"};
  const double nan = std::numeric_limits<double>::quiet_NaN();
  data.values = {1.0, 0.0, 0.5, 0.25, nan, 1.0};
  auto img = RenderHeatmap(data);
  ASSERT_TRUE(img.ok());
  auto png = EncodePng(*img);
  ASSERT_TRUE(png.ok());
  const RgbImage back = DecodePng(*png);
  HeatmapLayout layout;
  layout.columns = 3;
  layout.rows = 2;
  ASSERT_EQ(back.width, layout.width());
  ASSERT_EQ(back.height, layout.height());
  for (int r = 0; r < 2; ++r) {
    for (int c = 0; c < 3; ++c) {
      const double v = data.values[static_cast<size_t>(r * 3 + c)];
      uint8_t want[3] = {200, 200, 200};
      if (!std::isnan(v)) AccuracyColor(v, want);
      const size_t i = 3 * (static_cast<size_t>(layout.CellCenterY(r)) * back.width +
                            layout.CellCenterX(c));
      EXPECT_EQ(back.rgb[i], want[0]) << r << "," << c;
      EXPECT_EQ(back.rgb[i + 1], want[1]);
      EXPECT_EQ(back.rgb[i + 2], want[2]);
    }
  }
  // Right is green, wrong is red.
  uint8_t green[3], red[3];
  AccuracyColor(1.0, green);
  AccuracyColor(0.0, red);
  EXPECT_GT(green[1], green[0]);
  EXPECT_GT(red[0], red[1]);
  // The labels put black pixels left of the rows.
  bool any_black = false;
  for (int y = 0; y < back.height; ++y)
    for (int x = 0; x < HeatmapLayout::kLeft; ++x)
      any_black |= back.rgb[3 * (static_cast<size_t>(y) * back.width + x)] == 0;
  EXPECT_TRUE(any_black);
  data.values.pop_back();
  EXPECT_FALSE(RenderHeatmap(data).ok());
}

TEST(ReportTest, Labels) {
  EXPECT_EQ(LengthLabel(1024), "1K");
  EXPECT_EQ(LengthLabel(1 << 20), "1M");
  EXPECT_EQ(LengthLabel(300), "300");
  EXPECT_EQ(PercentLabel(0.25), "25%");
  EXPECT_EQ(PercentLabel(0.125), "12.5%");
}

}  // namespace
}  // namespace millipede
