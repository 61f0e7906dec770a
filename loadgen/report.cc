#include "loadgen/report.h"

#include <algorithm>
#include <cstdio>
#include <iterator>

namespace millipede::loadgen {
namespace {

Json DistributionJson(const Distribution& d) {
  return {{"count", d.count}, {"mean", d.mean}, {"p50", d.p50},
          {"p90", d.p90},     {"p99", d.p99},   {"max", d.max}};
}

// The records `keep` accepts.
template <typename Keep>
std::vector<RequestRecord> Select(const std::vector<RequestRecord>& records, Keep keep) {
  std::vector<RequestRecord> out;
  std::copy_if(records.begin(), records.end(), std::back_inserter(out), keep);
  return out;
}

bool IsPlaced(const RequestRecord& r) { return r.placed; }
bool IsArrival(const RequestRecord& r) { return !r.placed; }
// Arrivals about a document, and the others.
bool AboutDocument(const RequestRecord& r) { return !r.placed && r.document >= 0; }
bool OtherPrompt(const RequestRecord& r) { return !r.placed && r.document < 0; }

bool AnyDocument(const std::vector<RequestRecord>& records) {
  return std::any_of(records.begin(), records.end(), AboutDocument);
}

bool AnyPlaced(const std::vector<RequestRecord>& records) {
  return std::any_of(records.begin(), records.end(), IsPlaced);
}

std::string Format(const char* format, double a, double b = 0, double c = 0) {
  char line[160];
  std::snprintf(line, sizeof(line), format, a, b, c);
  return line;
}

void PrintDistribution(std::ostream& out, const char* name, const Distribution& d) {
  char line[160];
  std::snprintf(line, sizeof(line), "  %-5s %10.2f %10.2f %10.2f %10.2f %10.2f %8lld\n", name,
                d.mean * 1e3, d.p50 * 1e3, d.p90 * 1e3, d.p99 * 1e3, d.max * 1e3,
                static_cast<long long>(d.count));
  out << line;
}

}  // namespace

Json SummaryJson(const BenchSummary& s) {
  return {{"requests", s.requests},
          {"ok", s.ok},
          {"cancelled", s.cancelled},
          {"failed", s.failed},
          {"cancel_too_late", s.cancel_too_late},
          {"failures", s.failures},
          {"failure_examples", s.failure_examples},
          {"duration_s", s.duration_s},
          {"prompt_tokens", s.prompt_tokens},
          {"cached_tokens", s.cached_tokens},
          {"output_tokens", s.output_tokens},
          {"request_throughput", s.request_throughput},
          {"output_token_throughput", s.output_token_throughput},
          {"total_token_throughput", s.total_token_throughput},
          {"ttft_s", DistributionJson(s.ttft_s)},
          {"tpot_s", DistributionJson(s.tpot_s)},
          {"itl_s", DistributionJson(s.itl_s)},
          {"e2e_s", DistributionJson(s.e2e_s)}};
}

Json RecordJson(const RequestRecord& r) {
  Json j = {{"index", r.index},
            {"placed", r.placed},
            {"prompt_tokens", r.prompt_tokens},
            {"requested_output_tokens", r.requested_output_tokens},
            {"output_tokens", r.output_tokens},
            {"outputs", r.output_times_s.size()},
            {"outcome", OutcomeName(r.outcome)},
            {"start_s", r.start_s},
            {"e2e_s", r.end_s - r.start_s}};
  if (r.cancel_after_tokens) j["cancel_after_tokens"] = *r.cancel_after_tokens;
  if (r.document >= 0) j["document"] = r.document;
  if (r.cached_tokens >= 0) j["cached_tokens"] = r.cached_tokens;
  if (!r.output_times_s.empty()) j["ttft_s"] = r.output_times_s.front() - r.start_s;
  if (r.outcome == Outcome::kFailed) {
    j["failure_code"] = r.failure_code;
    j["failure_message"] = r.failure_message;
  }
  return j;
}

Json ReportJson(const Json& config, const std::vector<RequestRecord>& records) {
  const double duration = RunDuration(records);
  Json report = {{"config", config}, {"summary", SummaryJson(Summarize(records, duration))}};
  if (AnyPlaced(records)) {
    report["arrivals"] = SummaryJson(Summarize(Select(records, IsArrival), duration));
    Json placed = Json::array();
    for (const RequestRecord& r : Select(records, IsPlaced)) placed.push_back(RecordJson(r));
    report["placed"] = placed;
  }
  if (AnyDocument(records)) {
    report["about_documents"] = SummaryJson(Summarize(Select(records, AboutDocument), duration));
    report["other_prompts"] = SummaryJson(Summarize(Select(records, OtherPrompt), duration));
  }
  Json all = Json::array();
  for (const RequestRecord& r : records) all.push_back(RecordJson(r));
  report["requests"] = all;
  return report;
}

void PrintSummary(std::ostream& out, const std::string& title, const BenchSummary& s) {
  out << title << " (" << s.requests << " requests)\n";
  out << "  ok " << s.ok << ", cancelled " << s.cancelled << ", failed " << s.failed;
  if (s.cancel_too_late > 0) out << " (" << s.cancel_too_late << " ended before their cancel)";
  out << "\n";
  for (const auto& [code, count] : s.failures) {
    out << "  failed " << count << " x " << code << ": " << s.failure_examples.at(code) << "\n";
  }
  if (s.cached_tokens > 0) {
    out << "  prompt tokens " << s.prompt_tokens << ", from the prefix cache " << s.cached_tokens
        << Format(" (%.1f%%)\n", 100.0 * static_cast<double>(s.cached_tokens) /
                                     static_cast<double>(std::max<int64_t>(1, s.prompt_tokens)));
  }
  out << Format("  duration %.2f s; %.3f req/s", s.duration_s, s.request_throughput)
      << Format("; output %.1f tok/s; total %.1f tok/s\n", s.output_token_throughput,
                s.total_token_throughput);
  out << "  (ms)        mean        p50        p90        p99        max    count\n";
  PrintDistribution(out, "TTFT", s.ttft_s);
  PrintDistribution(out, "TPOT", s.tpot_s);
  PrintDistribution(out, "ITL", s.itl_s);
  PrintDistribution(out, "E2E", s.e2e_s);
}

void PrintReport(std::ostream& out, const std::vector<RequestRecord>& records) {
  const double duration = RunDuration(records);
  PrintSummary(out, "all requests", Summarize(records, duration));
  if (AnyDocument(records)) {
    PrintSummary(out, "questions about documents",
                 Summarize(Select(records, AboutDocument), duration));
    PrintSummary(out, "other prompts", Summarize(Select(records, OtherPrompt), duration));
  }
  if (!AnyPlaced(records)) return;
  PrintSummary(out, "arrivals", Summarize(Select(records, IsArrival), duration));
  for (const RequestRecord& r : Select(records, IsPlaced)) {
    out << "placed request " << r.index << " (" << r.prompt_tokens << " + "
        << r.requested_output_tokens << " tokens, sent at " << Format("%.2f s", r.start_s)
        << "): " << OutcomeName(r.outcome);
    if (!r.output_times_s.empty()) {
      out << Format(", TTFT %.1f ms", (r.output_times_s.front() - r.start_s) * 1e3);
    }
    out << Format(", E2E %.1f ms\n", (r.end_s - r.start_s) * 1e3);
  }
}

}  // namespace millipede::loadgen
