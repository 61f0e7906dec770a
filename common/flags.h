// Command-line flags for the tools: `--name value`, `--name=value` and boolean `--name`.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace millipede {

class Flags {
 public:
  // `boolean_flags` take no value; every other `--name` takes one. `--` ends flag parsing.
  // Unknown names are accepted here and rejected by CheckKnown, so the error names them all.
  static StatusOr<Flags> Parse(int argc, char** argv, const std::vector<std::string>& boolean_flags);

  // InvalidArgument naming any flag outside `known` (boolean and valued together).
  Status CheckKnown(const std::vector<std::string>& known) const;

  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  bool GetBool(const std::string& name) const { return Has(name); }
  // The last value given for the flag.
  std::optional<std::string> Get(const std::string& name) const;
  // Every value given for a repeatable flag, in order.
  std::vector<std::string> GetAll(const std::string& name) const;
  StatusOr<std::string> GetRequired(const std::string& name) const;
  StatusOr<int64_t> GetInt(const std::string& name, int64_t fallback) const;
  StatusOr<double> GetDouble(const std::string& name, double fallback) const;
  // Arguments that are not flags, in order.
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::vector<std::string>> values_;
  std::vector<std::string> positional_;
};

// Strict number parsing: the whole string must be the number.
StatusOr<int64_t> ParseInt64(const std::string& text, const std::string& what);
StatusOr<double> ParseDouble(const std::string& text, const std::string& what);

}  // namespace millipede
