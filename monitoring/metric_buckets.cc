#include "monitoring/metric_buckets.h"

namespace millipede {

std::vector<double> TtftBuckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,  0.75, 1,    2.5, 5,
          7.5,   10,    20,   40,   80,   160,  320,  640, 1200, 1800, 2400, 3000, 3600};
}

std::vector<double> TpotBuckets() {
  return {0.001, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1,
          0.15,  0.2,   0.3,  0.4,   0.5,  0.75,  1,    2.5,  5,    10,    20};
}

std::vector<double> RequestLatencyBuckets() {
  return {0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1,   1.5, 2,   2.5,  5,    10,  15,
          20,   30,   40,  50,  60,  120, 240, 480, 960, 1920, 3600, 7200};
}

std::vector<double> ThroughputBuckets() {
  return {1,    2,    5,     10,    20,    50,     100,    200,    500,    1000,
          2000, 5000, 10000, 20000, 50000, 100000, 200000, 500000, 1000000};
}

}  // namespace millipede
