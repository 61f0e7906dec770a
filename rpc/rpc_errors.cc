#include "rpc/rpc_errors.h"

namespace millipede::rpc {

void ThrowStatus(const Status& status) {
  kj::throwFatalException(kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__,
                                        kj::str(status.ToString().c_str())));
}

StatusCode StatusCodeFromName(const std::string& name) {
  for (int c = static_cast<int>(StatusCode::kInvalidArgument);
       c <= static_cast<int>(StatusCode::kDeviceError); ++c) {
    if (name == StatusCodeName(static_cast<StatusCode>(c))) return static_cast<StatusCode>(c);
  }
  return StatusCode::kInternal;
}

Status StatusFromException(const kj::Exception& e) {
  std::string text(e.getDescription().cStr());
  // A server error arrives as "remote exception: CODE: message".
  constexpr char kRemote[] = "remote exception: ";
  if (text.rfind(kRemote, 0) == 0) text.erase(0, sizeof(kRemote) - 1);
  const size_t colon = text.find(": ");
  if (colon != std::string::npos) {
    const StatusCode code = StatusCodeFromName(text.substr(0, colon));
    if (code != StatusCode::kInternal || text.rfind("INTERNAL: ", 0) == 0)
      return Status(code, text.substr(colon + 2));
  }
  if (e.getType() == kj::Exception::Type::DISCONNECTED)
    return IoError("lost the connection to the server: " + text);
  return IoError(text);
}

}  // namespace millipede::rpc
