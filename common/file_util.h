// Whole-file reads, writes and read-only memory maps.
#pragma once

#include <cstddef>
#include <string>

#include "common/status.h"

namespace millipede {

StatusOr<std::string> ReadFileToString(const std::string& path);
Status WriteStringToFile(const std::string& path, const std::string& contents);
bool FileExists(const std::string& path);
// Joins two path parts with one '/'.
std::string JoinPath(const std::string& a, const std::string& b);

// A read-only memory map of a whole file. Move-only; unmaps on destruction.
class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  static StatusOr<MappedFile> Open(const std::string& path);
  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace millipede
