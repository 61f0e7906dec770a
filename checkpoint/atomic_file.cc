#include "checkpoint/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <utility>

namespace millipede {
namespace {

std::string ErrnoText(int e) { return std::strerror(e); }

}  // namespace

AtomicFileWriter::~AtomicFileWriter() { Abandon(); }

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      path_(std::move(other.path_)),
      temp_path_(std::exchange(other.temp_path_, std::string())) {}

AtomicFileWriter& AtomicFileWriter::operator=(AtomicFileWriter&& other) noexcept {
  if (this != &other) {
    Abandon();
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    temp_path_ = std::exchange(other.temp_path_, std::string());
  }
  return *this;
}

void AtomicFileWriter::Abandon() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_path_.empty()) ::unlink(temp_path_.c_str());
  temp_path_.clear();
}

StatusOr<AtomicFileWriter> AtomicFileWriter::Create(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  AtomicFileWriter w;
  w.path_ = path;
  // O_EXCL with a per-process counter avoids clobbering a concurrent writer's temporary file.
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string temp =
        path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
    int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      w.fd_ = fd;
      w.temp_path_ = std::move(temp);
      return w;
    }
    const int e = errno;
    if (e != EEXIST) return IoError("cannot create " + temp + ": " + ErrnoText(e));
  }
  return IoError("cannot create a temporary file next to " + path);
}

Status AtomicFileWriter::Append(const void* data, size_t size) {
  if (fd_ < 0) return FailedPreconditionError("write to " + path_ + " after commit or failure");
  const auto* p = static_cast<const unsigned char*>(data);
  // Linux writes at most about 2 GiB per call; smaller chunks keep each call bounded.
  constexpr size_t kMaxChunk = size_t{1} << 30;
  while (size > 0) {
    ssize_t n = ::write(fd_, p, std::min(size, kMaxChunk));
    if (n < 0) {
      const int e = errno;
      if (e == EINTR) continue;
      return IoError("error writing " + temp_path_ + ": " + ErrnoText(e));
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return OkStatus();
}

Status AtomicFileWriter::Commit() {
  if (fd_ < 0) return FailedPreconditionError("commit of " + path_ + " after commit or failure");
  if (::fsync(fd_) != 0) {
    const int e = errno;
    return IoError("cannot flush " + temp_path_ + ": " + ErrnoText(e));
  }
  const int rc = ::close(fd_);
  const int close_errno = errno;
  fd_ = -1;
  if (rc != 0) return IoError("error closing " + temp_path_ + ": " + ErrnoText(close_errno));
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const int e = errno;
    return IoError("cannot rename " + temp_path_ + " to " + path_ + ": " + ErrnoText(e));
  }
  temp_path_.clear();
  return OkStatus();
}

Status WriteFileAtomically(const std::string& path, const std::string& contents) {
  MP_ASSIGN_OR_RETURN(AtomicFileWriter w, AtomicFileWriter::Create(path));
  MP_RETURN_IF_ERROR(w.Append(contents.data(), contents.size()));
  return w.Commit();
}

}  // namespace millipede
