// JSON parsing with Status errors (nlohmann::json underneath) and typed field access.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/status.h"

namespace millipede {

using Json = nlohmann::json;

// Deepest nesting of arrays/objects accepted from files: real configs, headers and tokenizers
// nest a handful of levels, and a bound keeps recursive consumers (dump, destruction) safe.
inline constexpr int kMaxJsonDepth = 64;

// Parses text; `what` names the source in the error ("config.json"). Nesting deeper than
// kMaxJsonDepth is an error.
StatusOr<Json> ParseJson(std::string_view text, const std::string& what);
StatusOr<Json> ParseJsonFile(const std::string& path);

// A short rendering of a value for error messages: scalars as JSON (cut at 60 characters),
// arrays and objects by type and size (never recursing into them).
std::string DescribeJson(const Json& v);

// Typed access to an object's field. Missing or mistyped fields are InvalidArgument errors
// naming `what` and the key.
StatusOr<int64_t> JsonGetInt(const Json& obj, const char* key, const std::string& what);
StatusOr<double> JsonGetNumber(const Json& obj, const char* key, const std::string& what);
StatusOr<std::string> JsonGetString(const Json& obj, const char* key, const std::string& what);
StatusOr<bool> JsonGetBool(const Json& obj, const char* key, const std::string& what);
// As above, but a missing or null field gives `fallback`.
StatusOr<int64_t> JsonGetIntOr(const Json& obj, const char* key, int64_t fallback,
                               const std::string& what);
StatusOr<double> JsonGetNumberOr(const Json& obj, const char* key, double fallback,
                                 const std::string& what);
StatusOr<std::string> JsonGetStringOr(const Json& obj, const char* key, std::string fallback,
                                      const std::string& what);
StatusOr<bool> JsonGetBoolOr(const Json& obj, const char* key, bool fallback,
                             const std::string& what);

}  // namespace millipede
