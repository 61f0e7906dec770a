// Errors as OpenAI clients expect them: an HTTP status plus
// {"error": {"message", "type", "param", "code"}}.
#pragma once

#include <string>

#include "common/status.h"

namespace millipede {

struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the request field at fault; empty = null
  std::string code;   // a machine-readable reason; empty = null
};

// 400 invalid_request_error naming `param`.
ApiError InvalidField(const std::string& param, const std::string& message);

// Maps a JobService status: InvalidArgument -> 400, OutOfRange -> 400 context_length_exceeded,
// ResourceExhausted -> 429 queue_full, FailedPrecondition and Cancelled -> 503, NotFound -> 404,
// Unimplemented -> 501, anything else -> 500 server_error.
ApiError ApiErrorFromStatus(const Status& status);

// The JSON body: {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}.
std::string ApiErrorBody(const ApiError& error);

}  // namespace millipede
