// Histogram bucket boundaries of the service's latency and throughput metrics.
#pragma once

#include <vector>

namespace millipede {

// Time to first token, seconds: from 1 ms (short prompts) up to one hour (million-token
// prefills on few GPUs).
std::vector<double> TtftBuckets();
// Time between consecutive output tokens, seconds: 1 ms .. 20 s.
std::vector<double> TpotBuckets();
// End-to-end and queue latency, seconds: 10 ms .. 2 hours.
std::vector<double> RequestLatencyBuckets();
// Per-job throughput, tokens per second: 1 .. 1e6 (prefill of long prompts is fast).
std::vector<double> ThroughputBuckets();

}  // namespace millipede
