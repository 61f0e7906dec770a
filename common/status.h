// Status and StatusOr: the error type returned by every fallible function below the RPC boundary.
#pragma once

#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <variant>

namespace millipede {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument,    // the caller broke a contract (bad input, bad shape, bad file)
  kNotFound,           // a file, tensor or key that must exist does not
  kOutOfRange,         // an index, size or value outside what is allowed
  kResourceExhausted,  // memory, queue or capacity limits
  kUnimplemented,      // recognised but not available (yet) in this build
  kFailedPrecondition, // the system is not in a state where this can run
  kCancelled,
  kIoError,            // the operating system refused a read, write or map
  kInternal,           // our own broken invariant
  kDeviceError,        // CUDA, NCCL or MPI reported an error
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message" (or "OK").
  std::string ToString() const;
  // Adds context in front of the message: "context: message". A no-op on OK.
  Status WithContext(const std::string& context) const;
  // Explicitly discards a status (for best-effort cleanup paths).
  void IgnoreError() const {}

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
Status InvalidArgumentError(std::string message);
Status NotFoundError(std::string message);
Status OutOfRangeError(std::string message);
Status ResourceExhaustedError(std::string message);
Status UnimplementedError(std::string message);
Status FailedPreconditionError(std::string message);
Status CancelledError(std::string message);
Status IoError(std::string message);
Status InternalError(std::string message);
Status DeviceError(std::string message);

// A value or the error that prevented it.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const T& value) : value_(value) {}                 // NOLINT(runtime/explicit)
  StatusOr(T&& value) : value_(std::move(value)) {}           // NOLINT(runtime/explicit)
  StatusOr(Status status)  // NOLINT(runtime/explicit)
      : status_(status.ok() ? Status(StatusCode::kInternal, "StatusOr made from an OK status")
                            : std::move(status)) {}

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

namespace detail {
// Streams any number of arguments into one string (used by the check macros).
template <typename... Args>
std::string StrCat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}
}  // namespace detail

}  // namespace millipede

#define MP_CONCAT_INNER_(a, b) a##b
#define MP_CONCAT_(a, b) MP_CONCAT_INNER_(a, b)

// Returns the status from the enclosing function if it is an error.
#define MP_RETURN_IF_ERROR(expr)                        \
  do {                                                  \
    ::millipede::Status mp_status_ = (expr);            \
    if (!mp_status_.ok()) return mp_status_;            \
  } while (0)

// `MP_ASSIGN_OR_RETURN(auto x, F())` declares x from a StatusOr or returns its error.
#define MP_ASSIGN_OR_RETURN(lhs, expr) \
  MP_ASSIGN_OR_RETURN_IMPL_(MP_CONCAT_(mp_statusor_, __LINE__), lhs, expr)
#define MP_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()

// A caller's broken contract: returns InvalidArgument with the message parts streamed together.
#define MP_REQUIRE(cond, ...)                                                          \
  do {                                                                                 \
    if (!(cond)) return ::millipede::InvalidArgumentError(::millipede::detail::StrCat(__VA_ARGS__)); \
  } while (0)

// Our own broken invariant: returns Internal naming the condition, file and line.
#define MP_ASSERT(cond, ...)                                                           \
  do {                                                                                 \
    if (!(cond))                                                                       \
      return ::millipede::InternalError(::millipede::detail::StrCat(                   \
          "invariant `" #cond "` failed at " __FILE__ ":", __LINE__ __VA_OPT__(, ": ", ) \
              __VA_ARGS__));                                                           \
  } while (0)
