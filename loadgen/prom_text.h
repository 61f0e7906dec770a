// Reading the coordinator's /metrics page (Prometheus' text format) for the load generator's
// report: the KV and job gauges that say whether the service returned to idle.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/json_util.h"
#include "common/status.h"

namespace millipede::loadgen {

// One sample line: `name{labels} value` (labels as written, without the braces; empty when
// none). Comment lines and timestamps are skipped.
struct PromSample {
  std::string name;
  std::string labels;
  double value = 0;
};

// Parses every sample line; a line that is neither a comment, blank, nor `name[{...}] value
// [timestamp]` is an error naming it.
StatusOr<std::vector<PromSample>> ParsePrometheusText(std::string_view text);

// The service gauges of a scrape as JSON: every series of millipede_kv_* metrics and of
// millipede_requests_running / millipede_requests_waiting, as {"name": {"labels": value}},
// plus "kv_bytes_total" (the sum of millipede_kv_cache_bytes), "requests_running" and
// "requests_waiting" (sums). Series added later under those names are included as they come.
Json ServiceGauges(const std::vector<PromSample>& samples);

// True when the gauges say the service holds no KV and runs and queues no job (false when
// the KV or running-jobs series are missing).
bool ServiceIdle(const Json& gauges);

}  // namespace millipede::loadgen
