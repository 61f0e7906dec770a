#include "loadgen/bench_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace millipede::loadgen {

const char* OutcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::kOk:
      return "ok";
    case Outcome::kCancelled:
      return "cancelled";
    case Outcome::kFailed:
      return "failed";
  }
  return "unknown";
}

double Percentile(const std::vector<double>& sorted, double p) {
  const double rank = p / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

Distribution Summarize(std::vector<double> values) {
  Distribution d;
  if (values.empty()) return d;
  std::sort(values.begin(), values.end());
  double sum = 0;
  for (double v : values) sum += v;
  d.count = static_cast<int64_t>(values.size());
  d.mean = sum / static_cast<double>(values.size());
  d.p50 = Percentile(values, 50);
  d.p90 = Percentile(values, 90);
  d.p99 = Percentile(values, 99);
  d.max = values.back();
  return d;
}

namespace {

void CountOutcome(const RequestRecord& r, BenchSummary& s) {
  switch (r.outcome) {
    case Outcome::kOk:
      ++s.ok;
      if (r.cancel_after_tokens) ++s.cancel_too_late;
      break;
    case Outcome::kCancelled:
      ++s.cancelled;
      break;
    case Outcome::kFailed:
      ++s.failed;
      ++s.failures[r.failure_code];
      s.failure_examples.emplace(r.failure_code, r.failure_message);
      break;
  }
}

}  // namespace

BenchSummary Summarize(const std::vector<RequestRecord>& records, double duration_s) {
  BenchSummary s;
  s.requests = static_cast<int64_t>(records.size());
  s.duration_s = duration_s;
  std::vector<double> ttft, tpot, itl, e2e;
  for (const RequestRecord& r : records) {
    CountOutcome(r, s);
    if (r.outcome != Outcome::kOk) continue;
    s.prompt_tokens += r.prompt_tokens;
    s.output_tokens += r.output_tokens;
    if (r.cached_tokens > 0) s.cached_tokens += r.cached_tokens;
    e2e.push_back(r.end_s - r.start_s);
    const std::vector<double>& t = r.output_times_s;
    if (t.empty()) continue;
    ttft.push_back(t.front() - r.start_s);
    for (size_t i = 1; i < t.size(); ++i) itl.push_back(t[i] - t[i - 1]);
    if (r.output_tokens > 1) {
      tpot.push_back((t.back() - t.front()) / static_cast<double>(r.output_tokens - 1));
    }
  }
  if (duration_s > 0) {
    s.request_throughput = static_cast<double>(s.ok) / duration_s;
    s.output_token_throughput = static_cast<double>(s.output_tokens) / duration_s;
    s.total_token_throughput = static_cast<double>(s.prompt_tokens + s.output_tokens) / duration_s;
  }
  s.ttft_s = Summarize(std::move(ttft));
  s.tpot_s = Summarize(std::move(tpot));
  s.itl_s = Summarize(std::move(itl));
  s.e2e_s = Summarize(std::move(e2e));
  return s;
}

double RunDuration(const std::vector<RequestRecord>& records) {
  if (records.empty()) return 0;
  double first = std::numeric_limits<double>::infinity();
  double last = -std::numeric_limits<double>::infinity();
  for (const RequestRecord& r : records) {
    first = std::min(first, r.start_s);
    last = std::max(last, r.end_s);
  }
  return last - first;
}

}  // namespace millipede::loadgen
