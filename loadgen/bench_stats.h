// What one request of a load run saw (event timestamps, outcome) and the statistics of a run:
// TTFT, time per output token, inter-token latency and end-to-end latency distributions,
// throughputs and counts. Pure code.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace millipede::loadgen {

enum class Outcome {
  kOk,         // the stream ended normally (a planned cancel that came too late ends here too)
  kCancelled,  // cancelled or disconnected by us, as planned
  kFailed,     // refused, an error event, a lost connection or a timeout
};

const char* OutcomeName(Outcome outcome);

// One request's record. Times are seconds since the start of the run.
struct RequestRecord {
  int64_t index = 0;
  bool placed = false;
  int64_t prompt_tokens = 0;
  int64_t requested_output_tokens = 0;
  std::optional<int64_t> cancel_after_tokens;  // the plan's cancel point, if any
  Outcome outcome = Outcome::kFailed;
  std::string failure_code;  // e.g. "RESOURCE_EXHAUSTED", "http_429", "timeout"
  std::string failure_message;
  double start_s = 0;  // when the request was sent
  double end_s = 0;    // its last event (completion, error, cancel or disconnect)
  // When output arrived: one entry per token event (RPC) or per streamed text chunk (HTTP,
  // whose chunks carry one token or several whose text completes together).
  std::vector<double> output_times_s;
  int64_t output_tokens = 0;  // tokens generated, as the server counted them
  int64_t document = -1;      // the document its prompt starts with (-1: none)
  // Prompt tokens whose KV came from the server's prefix cache, as it reported them (-1: not
  // reported).
  int64_t cached_tokens = -1;
};

// Distribution of a sample. Percentiles interpolate linearly between order statistics (numpy's
// default). An empty sample has count 0 and zeros elsewhere.
struct Distribution {
  int64_t count = 0;
  double mean = 0;
  double p50 = 0;
  double p90 = 0;
  double p99 = 0;
  double max = 0;
};

// The p-th percentile (p in [0, 100]) of `sorted` (ascending, non-empty).
double Percentile(const std::vector<double>& sorted, double p);

Distribution Summarize(std::vector<double> values);

// Statistics over a set of requests. Latencies count the requests that ended kOk; throughputs
// divide their tokens (and their number) by `duration_s`, the run's wall time.
struct BenchSummary {
  int64_t requests = 0;
  int64_t ok = 0;
  int64_t cancelled = 0;
  int64_t failed = 0;
  int64_t cancel_too_late = 0;              // planned cancels whose request ended kOk first
  std::map<std::string, int64_t> failures;  // by failure_code
  std::map<std::string, std::string> failure_examples;  // the first message of each code
  double duration_s = 0;
  int64_t prompt_tokens = 0;           // of kOk requests
  int64_t cached_tokens = 0;           // of kOk requests that reported them
  int64_t output_tokens = 0;           // of kOk requests
  double request_throughput = 0;       // kOk requests / s
  double output_token_throughput = 0;  // output tokens / s
  double total_token_throughput = 0;   // (prompt + output tokens) / s
  Distribution ttft_s;                 // send to first output
  Distribution tpot_s;  // per request: (last output - first output) / (output tokens - 1)
  Distribution itl_s;   // every gap between consecutive outputs of every request
  Distribution e2e_s;   // send to end
};

BenchSummary Summarize(const std::vector<RequestRecord>& records, double duration_s);

// The run's wall time: the earliest start to the latest end (0 without records).
double RunDuration(const std::vector<RequestRecord>& records);

}  // namespace millipede::loadgen
