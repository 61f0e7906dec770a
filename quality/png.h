// A minimal PNG encoder (8-bit RGB, no interlace, zlib-compressed IDAT, CRC-32 per chunk).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace millipede {

// An 8-bit RGB image: pixel (x, y) is rgb[3 * (y * width + x) + {0, 1, 2}].
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;

  RgbImage() = default;
  RgbImage(int w, int h, uint8_t r, uint8_t g, uint8_t b);
  void Set(int x, int y, uint8_t r, uint8_t g, uint8_t b);
  // Fills [x0, x1) x [y0, y1), clipped to the image.
  void FillRect(int x0, int y0, int x1, int y1, uint8_t r, uint8_t g, uint8_t b);
};

// The PNG file bytes of `image` (width and height in [1, 2^24], rgb of 3 * width * height).
StatusOr<std::string> EncodePng(const RgbImage& image);
// EncodePng, then written to `path`.
Status WritePng(const std::string& path, const RgbImage& image);

}  // namespace millipede
