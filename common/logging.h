// Minimal leveled logging to stderr: MP_LOG(INFO) << "loaded " << n << " tensors";
#pragma once

#include <sstream>

namespace millipede {

enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Messages below this level are dropped. Default: kInfo, or MILLIPEDE_LOG_LEVEL
// (debug|info|warning|error) from the environment.
LogLevel GetLogLevel();
void SetLogLevel(LogLevel level);
// Prefix every line with this tag (e.g. "rank 3"); empty by default.
void SetLogTag(const char* tag);

class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

}  // namespace millipede

#define MP_LOG_LEVEL_DEBUG ::millipede::LogLevel::kDebug
#define MP_LOG_LEVEL_INFO ::millipede::LogLevel::kInfo
#define MP_LOG_LEVEL_WARNING ::millipede::LogLevel::kWarning
#define MP_LOG_LEVEL_ERROR ::millipede::LogLevel::kError
#define MP_LOG(level)                                            \
  if (MP_LOG_LEVEL_##level < ::millipede::GetLogLevel()) {       \
  } else                                                         \
    ::millipede::LogMessage(MP_LOG_LEVEL_##level, __FILE__, __LINE__).stream()
