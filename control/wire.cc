#include "control/wire.h"

namespace millipede::control {

void ByteWriter::PutBytes(const void* data, size_t count, size_t size) {
  Put<uint64_t>(count);
  Append(data, count * size);
}

void ByteWriter::Append(const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  bytes_.insert(bytes_.end(), p, p + size);
}

Status ByteReader::Finish() const {
  MP_RETURN_IF_ERROR(status_);
  MP_REQUIRE(pos_ == size_, "control message: ", size_ - pos_, " unread bytes at the end");
  return OkStatus();
}

bool ByteReader::Need(uint64_t count, size_t size) {
  if (!status_.ok()) return false;
  const size_t left = size_ - pos_;
  return Check(size != 0 && count <= left / size, "truncated: need ", count, " x ", size,
               " bytes, ", left, " left");
}

}  // namespace millipede::control
