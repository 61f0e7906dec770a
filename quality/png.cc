#include "quality/png.h"

#include <zlib.h>

#include <algorithm>

#include "common/file_util.h"

namespace millipede {
namespace {

void PutBigEndian32(std::string* out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(static_cast<char>(v >> shift));
}

// length, type, data, CRC-32 of type + data.
void PutChunk(std::string* out, const char type[4], const std::string& data) {
  PutBigEndian32(out, static_cast<uint32_t>(data.size()));
  std::string body(type, 4);
  body += data;
  out->append(body);
  const uLong crc =
      crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(body.data()),
            static_cast<uInt>(body.size()));
  PutBigEndian32(out, static_cast<uint32_t>(crc));
}

}  // namespace

RgbImage::RgbImage(int w, int h, uint8_t r, uint8_t g, uint8_t b)
    : width(w), height(h), rgb(static_cast<size_t>(w) * h * 3) {
  FillRect(0, 0, w, h, r, g, b);
}

void RgbImage::Set(int x, int y, uint8_t r, uint8_t g, uint8_t b) {
  if (x < 0 || y < 0 || x >= width || y >= height) return;
  const size_t i = 3 * (static_cast<size_t>(y) * width + x);
  rgb[i] = r;
  rgb[i + 1] = g;
  rgb[i + 2] = b;
}

void RgbImage::FillRect(int x0, int y0, int x1, int y1, uint8_t r, uint8_t g, uint8_t b) {
  for (int y = std::max(0, y0); y < std::min(height, y1); ++y)
    for (int x = std::max(0, x0); x < std::min(width, x1); ++x) Set(x, y, r, g, b);
}

StatusOr<std::string> EncodePng(const RgbImage& image) {
  constexpr int kMaxSide = 1 << 24;
  MP_REQUIRE(image.width >= 1 && image.height >= 1 && image.width <= kMaxSide &&
                 image.height <= kMaxSide,
             "PNG: image size ", image.width, "x", image.height, " out of range");
  const size_t row = 3 * static_cast<size_t>(image.width);
  MP_REQUIRE(image.rgb.size() == row * image.height, "PNG: ", image.rgb.size(),
             " bytes of pixels for a ", image.width, "x", image.height, " RGB image");
  // Each scanline starts with its filter type; 0 (none) keeps the encoder obviously right.
  std::string raw;
  raw.reserve((row + 1) * image.height);
  for (int y = 0; y < image.height; ++y) {
    raw.push_back(0);
    raw.append(reinterpret_cast<const char*>(image.rgb.data()) + y * row, row);
  }
  uLongf packed_size = compressBound(static_cast<uLong>(raw.size()));
  std::string packed(packed_size, '\0');
  const int z = compress2(reinterpret_cast<Bytef*>(packed.data()), &packed_size,
                          reinterpret_cast<const Bytef*>(raw.data()),
                          static_cast<uLong>(raw.size()), Z_BEST_COMPRESSION);
  if (z != Z_OK) return InternalError("PNG: zlib compress2 failed with " + std::to_string(z));
  packed.resize(packed_size);

  std::string out("\x89PNG\r\n\x1a\n", 8);
  std::string header;
  PutBigEndian32(&header, static_cast<uint32_t>(image.width));
  PutBigEndian32(&header, static_cast<uint32_t>(image.height));
  header += std::string("\x08\x02\x00\x00\x00", 5);  // 8 bits, RGB, deflate, filter 0, no interlace
  PutChunk(&out, "IHDR", header);
  PutChunk(&out, "IDAT", packed);
  PutChunk(&out, "IEND", "");
  return out;
}

Status WritePng(const std::string& path, const RgbImage& image) {
  MP_ASSIGN_OR_RETURN(std::string bytes, EncodePng(image));
  return WriteStringToFile(path, bytes);
}

}  // namespace millipede
