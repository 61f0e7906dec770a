// millipede-loadgen's output: the JSON report and the table on stdout.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "common/json_util.h"
#include "loadgen/bench_stats.h"

namespace millipede::loadgen {

// A summary as JSON: counts, "failures" {code: count}, "failure_examples" {code: message},
// duration_s, token counts, throughputs, and per latency {count, mean, p50, p90, p99, max} in
// seconds (ttft_s, tpot_s, itl_s, e2e_s).
Json SummaryJson(const BenchSummary& s);

// One request: index, placed, lengths, outcome, failure (code and message, when failed),
// cancel_after_tokens (when planned), start_s, ttft_s (when output arrived), e2e_s, outputs
// (token events or text chunks).
Json RecordJson(const RequestRecord& r);

// The report: {"config", "summary" (every request), "arrivals" (the arrival process's requests)
// and "placed" (per placed request) when requests were placed, "requests" (every request)}.
Json ReportJson(const Json& config, const std::vector<RequestRecord>& records);

// A readable table of one summary (latencies in milliseconds).
void PrintSummary(std::ostream& out, const std::string& title, const BenchSummary& s);

// The tables of a run: every request, and with placed requests the arrivals alone and each
// placed request's TTFT and end-to-end latency.
void PrintReport(std::ostream& out, const std::vector<RequestRecord>& records);

}  // namespace millipede::loadgen
