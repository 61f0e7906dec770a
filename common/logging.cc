#include "common/logging.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string>

namespace millipede {
namespace {

LogLevel LevelFromEnv() {
  const char* env = std::getenv("MILLIPEDE_LOG_LEVEL");
  if (env == nullptr) return LogLevel::kInfo;
  if (std::strcmp(env, "debug") == 0) return LogLevel::kDebug;
  if (std::strcmp(env, "warning") == 0) return LogLevel::kWarning;
  if (std::strcmp(env, "error") == 0) return LogLevel::kError;
  return LogLevel::kInfo;
}

LogLevel g_level = LevelFromEnv();
std::string g_tag;
std::mutex g_mutex;

const char* LevelLetter(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "D";
    case LogLevel::kInfo: return "I";
    case LogLevel::kWarning: return "W";
    case LogLevel::kError: return "E";
  }
  return "?";
}

}  // namespace

LogLevel GetLogLevel() { return g_level; }
void SetLogLevel(LogLevel level) { g_level = level; }
void SetLogTag(const char* tag) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_tag = tag ? tag : "";
}

LogMessage::LogMessage(LogLevel level, const char* file, int line) : level_(level) {
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%H:%M:%S", &tm);
  const char* base = std::strrchr(file, '/');
  stream_ << LevelLetter(level) << ' ' << buf << ' ' << (base ? base + 1 : file) << ':' << line
          << "] ";
}

LogMessage::~LogMessage() {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::string line = stream_.str();
  if (!g_tag.empty()) line = "[" + g_tag + "] " + line;
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stderr);
  (void)level_;
}

}  // namespace millipede
