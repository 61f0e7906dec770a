#include "common/flags.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace millipede {

StatusOr<Flags> Flags::Parse(int argc, char** argv,
                             const std::vector<std::string>& boolean_flags) {
  Flags f;
  bool flags_done = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (flags_done || arg.size() < 3 || arg.rfind("--", 0) != 0) {
      if (arg == "--") {
        flags_done = true;
        continue;
      }
      f.positional_.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2);
    std::optional<std::string> value;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    const bool is_bool =
        std::find(boolean_flags.begin(), boolean_flags.end(), name) != boolean_flags.end();
    if (is_bool) {
      if (value) return InvalidArgumentError("flag --" + name + " takes no value");
      f.values_[name].push_back("true");
      continue;
    }
    if (!value) {
      // A following "--flag" is a forgotten value, not the value (write --name=--x to mean it).
      if (i + 1 >= argc || std::string(argv[i + 1]).rfind("--", 0) == 0)
        return InvalidArgumentError("flag --" + name + " needs a value");
      value = argv[++i];
    }
    f.values_[name].push_back(*value);
  }
  return f;
}

Status Flags::CheckKnown(const std::vector<std::string>& known) const {
  std::string unknown;
  for (const auto& [name, unused] : values_)
    if (std::find(known.begin(), known.end(), name) == known.end())
      unknown += (unknown.empty() ? "--" : ", --") + name;
  if (!unknown.empty()) return InvalidArgumentError("unknown flag(s): " + unknown);
  return OkStatus();
}

std::optional<std::string> Flags::Get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second.back();
}

std::vector<std::string> Flags::GetAll(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

StatusOr<std::string> Flags::GetRequired(const std::string& name) const {
  auto v = Get(name);
  if (!v) return InvalidArgumentError("missing required flag --" + name);
  return *v;
}

StatusOr<int64_t> Flags::GetInt(const std::string& name, int64_t fallback) const {
  auto v = Get(name);
  if (!v) return fallback;
  return ParseInt64(*v, "--" + name);
}

StatusOr<double> Flags::GetDouble(const std::string& name, double fallback) const {
  auto v = Get(name);
  if (!v) return fallback;
  return ParseDouble(*v, "--" + name);
}

StatusOr<int64_t> ParseInt64(const std::string& text, const std::string& what) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0])) ||
      end != text.c_str() + text.size() || errno == ERANGE)
    return InvalidArgumentError(what + ": \"" + text + "\" is not an integer");
  return static_cast<int64_t>(v);
}

StatusOr<double> ParseDouble(const std::string& text, const std::string& what) {
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0])) ||
      end != text.c_str() + text.size() || errno == ERANGE || !std::isfinite(v))
    return InvalidArgumentError(what + ": \"" + text + "\" is not a finite number");
  return v;
}

}  // namespace millipede
