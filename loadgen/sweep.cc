#include "loadgen/sweep.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "common/file_util.h"
#include "loadgen/report.h"

namespace millipede::loadgen {
namespace {

std::vector<std::string> SplitCommas(const std::string& text) {
  std::vector<std::string> parts;
  size_t begin = 0;
  for (;;) {
    const size_t comma = text.find(',', begin);
    parts.push_back(text.substr(begin, comma == std::string::npos ? comma : comma - begin));
    if (comma == std::string::npos) return parts;
    begin = comma + 1;
  }
}

bool Qualifies(const SweepRun& r, double limit) {
  return r.summary.failed == 0 && r.summary.ok > 0 && r.summary.ttft_s.count > 0 &&
         r.summary.ttft_s.p50 < limit;
}

}  // namespace

StatusOr<std::vector<double>> ParseSweepRates(const std::string& text) {
  std::vector<double> rates;
  for (const std::string& part : SplitCommas(text)) {
    char* end = nullptr;
    const double rate = std::strtod(part.c_str(), &end);
    MP_REQUIRE(
        !part.empty() && end == part.c_str() + part.size() && std::isfinite(rate) && rate > 0,
        "--sweep-rates: \"", part, "\" is not a positive rate (requests per second)");
    rates.push_back(rate);
  }
  return rates;
}

StatusOr<std::vector<SweepPolicy>> ParseSweepPolicies(const std::string& text) {
  std::vector<SweepPolicy> policies;
  std::set<std::string> names;
  for (const std::string& part : SplitCommas(text)) {
    const size_t eq = part.find('=');
    SweepPolicy p{.name = part.substr(0, eq), .json = {}};
    MP_REQUIRE(!p.name.empty(), "--policies: an entry without a name in \"", text, "\"");
    MP_REQUIRE(names.insert(p.name).second, "--policies: \"", p.name, "\" is named twice");
    if (eq != std::string::npos) {
      const std::string path = part.substr(eq + 1);
      MP_REQUIRE(!path.empty(), "--policies: \"", p.name, "=\" names no file");
      MP_ASSIGN_OR_RETURN(p.json, ReadFileToString(path));
    }
    policies.push_back(std::move(p));
  }
  return policies;
}

std::vector<SweepBest> BestRuns(const std::vector<SweepRun>& runs, double ttft_p50_limit_s) {
  std::vector<SweepBest> best;
  for (size_t i = 0; i < runs.size(); ++i) {
    auto it = std::find_if(best.begin(), best.end(),
                           [&](const SweepBest& b) { return b.policy == runs[i].policy; });
    if (it == best.end()) it = best.insert(best.end(), SweepBest{runs[i].policy, -1});
    if (!Qualifies(runs[i], ttft_p50_limit_s)) continue;
    if (it->run < 0 || runs[i].rate > runs[static_cast<size_t>(it->run)].rate)
      it->run = static_cast<int>(i);
  }
  return best;
}

Json SweepJson(const std::vector<SweepRun>& runs, double ttft_p50_limit_s) {
  Json all = Json::array();
  for (const SweepRun& r : runs)
    all.push_back({{"policy", r.policy}, {"rate", r.rate}, {"summary", SummaryJson(r.summary)}});
  Json best = Json::array();
  const std::vector<SweepBest> chosen = BestRuns(runs, ttft_p50_limit_s);
  const SweepRun* first =
      !chosen.empty() && chosen[0].run >= 0 ? &runs[static_cast<size_t>(chosen[0].run)] : nullptr;
  for (const SweepBest& b : chosen) {
    Json j = {{"policy", b.policy},
              {"rate", nullptr},
              {"output_token_throughput", nullptr},
              {"vs_first", nullptr}};
    if (b.run >= 0) {
      const SweepRun& r = runs[static_cast<size_t>(b.run)];
      j["rate"] = r.rate;
      j["output_token_throughput"] = r.summary.output_token_throughput;
      if (first != nullptr && first->summary.output_token_throughput > 0)
        j["vs_first"] = r.summary.output_token_throughput / first->summary.output_token_throughput;
    }
    best.push_back(j);
  }
  return {{"ttft_p50_limit_s", ttft_p50_limit_s}, {"runs", all}, {"best", best}};
}

void PrintSweep(std::ostream& out, const std::vector<SweepRun>& runs, double ttft_p50_limit_s) {
  char line[256];
  out << "sweep (latencies in ms)\n"
      << "  policy            rate      ok  failed  TTFT p50  TTFT p99   ITL p50   ITL p99  "
         "out tok/s\n";
  for (const SweepRun& r : runs) {
    const BenchSummary& s = r.summary;
    std::snprintf(line, sizeof line, "  %-14s %7.2f %7lld %7lld %9.1f %9.1f %9.1f %9.1f %10.1f\n",
                  r.policy.c_str(), r.rate, static_cast<long long>(s.ok),
                  static_cast<long long>(s.failed), s.ttft_s.p50 * 1e3, s.ttft_s.p99 * 1e3,
                  s.itl_s.p50 * 1e3, s.itl_s.p99 * 1e3, s.output_token_throughput);
    out << line;
  }
  std::snprintf(line, sizeof line, "best rate with TTFT p50 below %.3g s:\n", ttft_p50_limit_s);
  out << line;
  const Json sweep = SweepJson(runs, ttft_p50_limit_s);
  for (const Json& b : sweep["best"]) {
    const std::string name = b["policy"].get<std::string>();
    if (b["rate"].is_null()) {
      out << "  " << name << ": none\n";
      continue;
    }
    std::snprintf(line, sizeof line, "  %s: %.2f req/s, %.1f output tok/s", name.c_str(),
                  b["rate"].get<double>(), b["output_token_throughput"].get<double>());
    out << line;
    if (!b["vs_first"].is_null()) {
      std::snprintf(line, sizeof line, " (%.2fx the first policy's)", b["vs_first"].get<double>());
      out << line;
    }
    out << "\n";
  }
}

}  // namespace millipede::loadgen
