// Writing a file through a temporary sibling that is renamed into place only when complete, so
// readers never see a half-written checkpoint and a failed write leaves the old file intact.
#pragma once

#include <cstddef>
#include <string>

#include "common/status.h"

namespace millipede {

class AtomicFileWriter {
 public:
  AtomicFileWriter() = default;
  // Removes the temporary file unless Commit succeeded.
  ~AtomicFileWriter();
  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  // Creates "<path>.tmp.<pid>.<n>" next to `path` (same directory, so the rename is atomic).
  static StatusOr<AtomicFileWriter> Create(const std::string& path);

  // Appends bytes, however many (writes are split and retried as the kernel requires).
  Status Append(const void* data, size_t size);
  // Flushes to disk and renames the temporary file to the final path.
  Status Commit();

 private:
  void Abandon();

  int fd_ = -1;
  std::string path_;
  std::string temp_path_;
};

// Writes `contents` to `path` through an AtomicFileWriter.
Status WriteFileAtomically(const std::string& path, const std::string& contents);

}  // namespace millipede
