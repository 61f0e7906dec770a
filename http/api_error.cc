#include "http/api_error.h"

#include "common/json_util.h"

namespace millipede {

ApiError InvalidField(const std::string& param, const std::string& message) {
  return ApiError{400, message, "invalid_request_error", param, ""};
}

ApiError ApiErrorFromStatus(const Status& status) {
  const std::string& message = status.message();
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
      return ApiError{400, message, "invalid_request_error", "", ""};
    case StatusCode::kOutOfRange:
      return ApiError{400, message, "invalid_request_error", "", "context_length_exceeded"};
    case StatusCode::kResourceExhausted:
      return ApiError{429, message, "rate_limit_error", "", "queue_full"};
    case StatusCode::kFailedPrecondition:
      return ApiError{503, message, "service_unavailable_error", "", "unavailable"};
    case StatusCode::kCancelled:
      return ApiError{503, message, "service_unavailable_error", "", "cancelled"};
    case StatusCode::kNotFound:
      return ApiError{404, message, "not_found_error", "", ""};
    case StatusCode::kUnimplemented:
      return ApiError{501, message, "invalid_request_error", "", "unsupported"};
    default:
      return ApiError{500, message, "server_error", "", StatusCodeName(status.code())};
  }
}

std::string ApiErrorBody(const ApiError& error) {
  auto or_null = [](const std::string& s) { return s.empty() ? Json(nullptr) : Json(s); };
  Json body = {{"error",
                {{"message", error.message},
                 {"type", error.type},
                 {"param", or_null(error.param)},
                 {"code", or_null(error.code)}}}};
  return body.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace millipede
