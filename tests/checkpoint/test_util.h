// Helpers shared by the checkpoint tests: scratch directories, raw file bytes, message checks.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <string>
#include <string_view>

#include "common/status.h"

namespace millipede::testing {

// A fresh directory under the test temp dir, removed with everything in it at scope exit.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = ::testing::TempDir() + "millipede_ckpt_XXXXXX";
    char* made = ::mkdtemp(pattern.data());
    EXPECT_NE(made, nullptr) << "mkdtemp failed for " << pattern;
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline void WriteBytes(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The 8-byte little-endian length prefix.
inline std::string LengthPrefix(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

// A safetensors image: the real length of `header`, the header, then `data_bytes` zero bytes.
inline std::string SafetensorsImage(std::string_view header, size_t data_bytes) {
  return LengthPrefix(header.size()) + std::string(header) + std::string(data_bytes, '\0');
}

// Expects an error whose message contains every one of `parts`.
inline void ExpectErrorContains(const Status& s, std::initializer_list<std::string_view> parts) {
  ASSERT_FALSE(s.ok()) << "expected an error containing \"" << *parts.begin() << "\"";
  for (std::string_view part : parts) {
    EXPECT_NE(s.message().find(part), std::string::npos)
        << "message \"" << s.message() << "\" lacks \"" << part << "\"";
  }
}

}  // namespace millipede::testing
