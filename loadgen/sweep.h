// millipede-loadgen's sweep: the same load at several arrival rates and under several attention
// policies, one run after another, and the table that compares them (the measure of sparse KV
// under continuous batching: the output tokens per second each policy reaches while its TTFT p50
// stays below a limit).
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "common/json_util.h"
#include "common/status.h"
#include "loadgen/bench_stats.h"

namespace millipede::loadgen {

// One policy of a sweep: a name for the tables and the policy-file JSON each request carries
// (empty: the workers' default).
struct SweepPolicy {
  std::string name;
  std::string json;
};

// "R1,R2,..." (requests per second, each positive and finite) in the given order;
// InvalidArgument naming the bad entry.
StatusOr<std::vector<double>> ParseSweepRates(const std::string& text);

// "NAME[=FILE],...": a policy per entry, its JSON read from FILE (none: the default policy);
// names must be distinct. InvalidArgument for an empty or repeated name, NotFound or IoError for
// a file that cannot be read.
StatusOr<std::vector<SweepPolicy>> ParseSweepPolicies(const std::string& text);

// One run of a sweep: its policy, its rate and what its requests saw.
struct SweepRun {
  std::string policy;
  double rate = 0;
  BenchSummary summary;
};

// Per policy (in the order of their first run): the run of the highest rate whose requests all
// ended as planned (none failed) with a TTFT p50 below `ttft_p50_limit_s`; -1 when none did.
struct SweepBest {
  std::string policy;
  int run = -1;  // index into the runs
};
std::vector<SweepBest> BestRuns(const std::vector<SweepRun>& runs, double ttft_p50_limit_s);

// {"ttft_p50_limit_s", "runs": [{"policy", "rate", "summary"}], "best": [{"policy", "rate",
// "output_token_throughput", "vs_first"}]} (rate null where no run qualified; vs_first: the
// output throughput over the first policy's best, null where either has none).
Json SweepJson(const std::vector<SweepRun>& runs, double ttft_p50_limit_s);

// The runs as a table (latencies in milliseconds), then each policy's best run.
void PrintSweep(std::ostream& out, const std::vector<SweepRun>& runs, double ttft_p50_limit_s);

}  // namespace millipede::loadgen
