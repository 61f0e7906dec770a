#include "control/wire.h"

namespace millipede::control {

void ByteWriter::PutString(const std::string& s) {
  Put<uint64_t>(s.size());
  bytes_.insert(bytes_.end(), s.begin(), s.end());
}

Status ByteReader::GetString(std::string* s) {
  uint64_t n = 0;
  MP_RETURN_IF_ERROR(Get(&n));
  MP_RETURN_IF_ERROR(Need(n));
  s->assign(data_ + pos_, n);
  pos_ += n;
  return OkStatus();
}

Status ByteReader::ExpectEnd() const {
  MP_REQUIRE(pos_ == size_, "control message: ", size_ - pos_, " unread bytes at the end");
  return OkStatus();
}

Status ByteReader::Need(uint64_t count, size_t size) const {
  const size_t left = size_ - pos_;
  MP_REQUIRE(size != 0 && count <= left / size, "control message truncated: need ", count, " x ",
             size, " bytes, ", left, " left");
  return OkStatus();
}

}  // namespace millipede::control
