#include "loadgen/prom_text.h"

#include <cctype>
#include <limits>

#include "common/flags.h"

namespace millipede::loadgen {
namespace {

bool NameChar(char c, bool first) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
         (!first && c >= '0' && c <= '9');
}

// Prometheus writes +Inf, -Inf and NaN (some clients "Nan"); ParseDouble takes only finite
// numbers.
StatusOr<double> ParseValue(const std::string& text) {
  std::string lower;
  for (char c : text) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "+inf" || lower == "inf") return std::numeric_limits<double>::infinity();
  if (lower == "-inf") return -std::numeric_limits<double>::infinity();
  if (lower == "nan") return std::numeric_limits<double>::quiet_NaN();
  return ParseDouble(text, "metric value");
}

StatusOr<PromSample> ParseSampleLine(std::string_view line) {
  PromSample s;
  size_t i = 0;
  while (i < line.size() && NameChar(line[i], i == 0)) ++i;
  MP_REQUIRE(i > 0, "bad metrics line \"", line, "\"");
  s.name = std::string(line.substr(0, i));
  if (i < line.size() && line[i] == '{') {
    // Label values may hold '}' inside quotes.
    bool quoted = false;
    size_t j = i + 1;
    for (; j < line.size() && (quoted || line[j] != '}'); ++j) {
      if (line[j] == '\\') {
        ++j;
      } else if (line[j] == '"') {
        quoted = !quoted;
      }
    }
    MP_REQUIRE(j < line.size(), "unterminated labels in metrics line \"", line, "\"");
    s.labels = std::string(line.substr(i + 1, j - i - 1));
    i = j + 1;
  }
  MP_REQUIRE(i < line.size() && line[i] == ' ', "bad metrics line \"", line, "\"");
  std::string_view rest = line.substr(i + 1);
  const size_t space = rest.find(' ');  // an optional timestamp follows
  MP_ASSIGN_OR_RETURN(s.value, ParseValue(std::string(rest.substr(0, space))));
  return s;
}

bool Selected(const std::string& name) {
  return name.rfind("millipede_kv_", 0) == 0 || name == "millipede_requests_running" ||
         name == "millipede_requests_waiting";
}

}  // namespace

StatusOr<std::vector<PromSample>> ParsePrometheusText(std::string_view text) {
  std::vector<PromSample> samples;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line.front() == '#') continue;
    MP_ASSIGN_OR_RETURN(PromSample s, ParseSampleLine(line));
    samples.push_back(std::move(s));
  }
  return samples;
}

Json ServiceGauges(const std::vector<PromSample>& samples) {
  Json out = Json::object();
  double kv = 0, running = 0, waiting = 0, reserved = 0;
  for (const PromSample& s : samples) {
    if (!Selected(s.name)) continue;
    out[s.name][s.labels] = s.value;
    if (s.name == "millipede_kv_cache_bytes") kv += s.value;
    if (s.name == "millipede_requests_running") running += s.value;
    if (s.name == "millipede_requests_waiting") waiting += s.value;
    if (s.name == "millipede_kv_reserved_positions") reserved += s.value;
  }
  out["kv_bytes_total"] = kv;
  out["requests_running"] = running;
  out["requests_waiting"] = waiting;
  out["kv_reserved_positions"] = reserved;
  return out;
}

bool ServiceIdle(const Json& gauges) {
  // A page without the series says nothing about idleness.
  if (!gauges.contains("millipede_kv_cache_bytes") ||
      !gauges.contains("millipede_requests_running")) {
    return false;
  }
  return gauges.value("kv_bytes_total", -1.0) == 0 && gauges.value("requests_running", -1.0) == 0 &&
         gauges.value("requests_waiting", -1.0) == 0 &&
         gauges.value("kv_reserved_positions", 0.0) == 0;
}

}  // namespace millipede::loadgen
