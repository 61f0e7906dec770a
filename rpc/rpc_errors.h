// The one place where a Status becomes an RPC error (a KJ exception whose description starts
// with the status code name) and where a client turns it back.
#pragma once

#include <kj/exception.h>

#include <string>

#include "common/status.h"

namespace millipede::rpc {

// Throws `status` (which must not be OK) as an RPC error: "CODE: message".
[[noreturn]] void ThrowStatus(const Status& status);

// The Status an RPC exception carries: the code named at the start of its description, or
// kIoError for a transport failure (disconnect, message too large) with KJ's description.
Status StatusFromException(const kj::Exception& e);

// StatusCode from its name ("INVALID_ARGUMENT"); kInternal when unknown.
StatusCode StatusCodeFromName(const std::string& name);

}  // namespace millipede::rpc
