#include "common/json_util.h"

#include <cmath>
#include <cstdint>

#include "common/file_util.h"

namespace millipede {

namespace {
struct TooDeep {};
}  // namespace

StatusOr<Json> ParseJson(std::string_view text, const std::string& what) {
  Json j;
  try {
    j = Json::parse(
        text.begin(), text.end(),
        [](int depth, Json::parse_event_t, Json&) {
          if (depth > kMaxJsonDepth) throw TooDeep{};
          return true;
        },
        /*allow_exceptions=*/false);
  } catch (const TooDeep&) {
    return InvalidArgumentError(what + ": JSON nested deeper than " +
                                std::to_string(kMaxJsonDepth) + " levels");
  }
  if (j.is_discarded()) {
    // Re-parse with exceptions only to recover the position of the error for the message. Not
    // only parse errors: a number that overflows a double is an out_of_range error.
    try {
      Json unused = Json::parse(text.begin(), text.end());
      (void)unused;
    } catch (const Json::exception& e) {
      return InvalidArgumentError(what + ": invalid JSON: " + e.what());
    }
    return InvalidArgumentError(what + ": invalid JSON");
  }
  return j;
}

std::string DescribeJson(const Json& v) {
  if (v.is_array() || v.is_object())
    return std::string(v.type_name()) + " of " + std::to_string(v.size()) + " element(s)";
  std::string s = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  constexpr size_t kMaxChars = 60;
  if (s.size() > kMaxChars) s = s.substr(0, kMaxChars) + "...";
  return s;
}

StatusOr<Json> ParseJsonFile(const std::string& path) {
  MP_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return ParseJson(text, path);
}

namespace {
Status FieldError(const std::string& what, const char* key, const char* expected) {
  return InvalidArgumentError(what + ": field \"" + key + "\" must be " + expected);
}
}  // namespace

StatusOr<int64_t> JsonGetInt(const Json& obj, const char* key, const std::string& what) {
  if (!obj.is_object() || !obj.contains(key))
    return InvalidArgumentError(what + ": missing field \"" + key + "\"");
  const Json& v = obj.at(key);
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    return FieldError(what, key, "an integer within 64 bits");
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    // Range-check before converting: casting an out-of-range double is undefined.
    double d = v.get<double>();
    if (d >= -9.2e18 && d <= 9.2e18 && d == std::floor(d)) return static_cast<int64_t>(d);
  }
  return FieldError(what, key, "an integer");
}

StatusOr<double> JsonGetNumber(const Json& obj, const char* key, const std::string& what) {
  if (!obj.is_object() || !obj.contains(key))
    return InvalidArgumentError(what + ": missing field \"" + key + "\"");
  const Json& v = obj.at(key);
  if (!v.is_number()) return FieldError(what, key, "a number");
  return v.get<double>();
}

StatusOr<std::string> JsonGetString(const Json& obj, const char* key, const std::string& what) {
  if (!obj.is_object() || !obj.contains(key))
    return InvalidArgumentError(what + ": missing field \"" + key + "\"");
  const Json& v = obj.at(key);
  if (!v.is_string()) return FieldError(what, key, "a string");
  return v.get<std::string>();
}

StatusOr<bool> JsonGetBool(const Json& obj, const char* key, const std::string& what) {
  if (!obj.is_object() || !obj.contains(key))
    return InvalidArgumentError(what + ": missing field \"" + key + "\"");
  const Json& v = obj.at(key);
  if (!v.is_boolean()) return FieldError(what, key, "true or false");
  return v.get<bool>();
}

namespace {
bool Absent(const Json& obj, const char* key) {
  return !obj.is_object() || !obj.contains(key) || obj.at(key).is_null();
}
}  // namespace

StatusOr<int64_t> JsonGetIntOr(const Json& obj, const char* key, int64_t fallback,
                               const std::string& what) {
  if (Absent(obj, key)) return fallback;
  return JsonGetInt(obj, key, what);
}
StatusOr<double> JsonGetNumberOr(const Json& obj, const char* key, double fallback,
                                 const std::string& what) {
  if (Absent(obj, key)) return fallback;
  return JsonGetNumber(obj, key, what);
}
StatusOr<std::string> JsonGetStringOr(const Json& obj, const char* key, std::string fallback,
                                      const std::string& what) {
  if (Absent(obj, key)) return fallback;
  return JsonGetString(obj, key, what);
}
StatusOr<bool> JsonGetBoolOr(const Json& obj, const char* key, bool fallback,
                             const std::string& what) {
  if (Absent(obj, key)) return fallback;
  return JsonGetBool(obj, key, what);
}

}  // namespace millipede
