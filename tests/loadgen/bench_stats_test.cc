#include "loadgen/bench_stats.h"

#include <gtest/gtest.h>

namespace millipede::loadgen {
namespace {

TEST(BenchStatsTest, PercentilesInterpolateAsNumpy) {
  const std::vector<double> v = {1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(Percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(Percentile(v, 50), 2.5);
  EXPECT_DOUBLE_EQ(Percentile(v, 90), 3.7);
  EXPECT_DOUBLE_EQ(Percentile(v, 99), 3.97);
  EXPECT_DOUBLE_EQ(Percentile(v, 100), 4);
  EXPECT_DOUBLE_EQ(Percentile({5}, 99), 5);

  Distribution d = Summarize({4, 1, 3, 2});  // unsorted input
  EXPECT_EQ(d.count, 4);
  EXPECT_DOUBLE_EQ(d.mean, 2.5);
  EXPECT_DOUBLE_EQ(d.p50, 2.5);
  EXPECT_DOUBLE_EQ(d.p90, 3.7);
  EXPECT_DOUBLE_EQ(d.max, 4);
  Distribution empty = Summarize({});
  EXPECT_EQ(empty.count, 0);
  EXPECT_EQ(empty.p99, 0);
}

RequestRecord Ok(double start, std::vector<double> outputs, double end, int64_t prompt,
                 int64_t tokens) {
  RequestRecord r;
  r.outcome = Outcome::kOk;
  r.start_s = start;
  r.output_times_s = std::move(outputs);
  r.end_s = end;
  r.prompt_tokens = prompt;
  r.output_tokens = tokens;
  return r;
}

TEST(BenchStatsTest, SummaryOfARun) {
  std::vector<RequestRecord> records;
  records.push_back(Ok(0.0, {0.5, 0.6, 0.8}, 0.9, 100, 3));
  records.push_back(Ok(1.0, {1.25, 1.35}, 1.4, 50, 2));
  // Text chunks that carried several tokens: TPOT divides by the tokens, ITL sees the chunks.
  records.push_back(Ok(2.0, {2.5, 3.0}, 3.0, 10, 5));
  RequestRecord cancelled;
  cancelled.outcome = Outcome::kCancelled;
  cancelled.cancel_after_tokens = 0;
  cancelled.start_s = 0.2;
  cancelled.end_s = 0.3;
  records.push_back(cancelled);
  RequestRecord late = Ok(0.1, {0.2}, 0.3, 7, 1);
  late.cancel_after_tokens = 0;  // ended before its cancel reached the server
  records.push_back(late);
  for (const char* code : {"RESOURCE_EXHAUSTED", "RESOURCE_EXHAUSTED", "http_500"}) {
    RequestRecord failed;
    failed.failure_code = code;
    failed.failure_message = std::string("because ") + code;
    records.push_back(failed);
  }

  ASSERT_DOUBLE_EQ(RunDuration(records), 3.0);
  const BenchSummary s = Summarize(records, 2.0);
  EXPECT_EQ(s.requests, 8);
  EXPECT_EQ(s.ok, 4);
  EXPECT_EQ(s.cancelled, 1);
  EXPECT_EQ(s.failed, 3);
  EXPECT_EQ(s.cancel_too_late, 1);
  EXPECT_EQ(s.failures.at("RESOURCE_EXHAUSTED"), 2);
  EXPECT_EQ(s.failures.at("http_500"), 1);
  EXPECT_EQ(s.failure_examples.at("http_500"), "because http_500");
  EXPECT_EQ(s.prompt_tokens, 167);
  EXPECT_EQ(s.output_tokens, 11);
  EXPECT_DOUBLE_EQ(s.request_throughput, 2.0);
  EXPECT_DOUBLE_EQ(s.output_token_throughput, 5.5);
  EXPECT_DOUBLE_EQ(s.total_token_throughput, 89.0);

  EXPECT_EQ(s.ttft_s.count, 4);
  EXPECT_NEAR(s.ttft_s.mean, (0.5 + 0.25 + 0.5 + 0.1) / 4, 1e-12);
  EXPECT_NEAR(s.ttft_s.max, 0.5, 1e-12);
  // Gaps 0.1, 0.2 | 0.1 | 0.5.
  EXPECT_EQ(s.itl_s.count, 4);
  EXPECT_NEAR(s.itl_s.mean, 0.9 / 4, 1e-12);
  EXPECT_NEAR(s.itl_s.p50, 0.15, 1e-12);
  EXPECT_NEAR(s.itl_s.max, 0.5, 1e-12);
  // Per request: 0.3 / 2, 0.1 / 1, 0.5 / 4 (one token: none).
  EXPECT_EQ(s.tpot_s.count, 3);
  EXPECT_NEAR(s.tpot_s.mean, (0.15 + 0.1 + 0.125) / 3, 1e-12);
  EXPECT_EQ(s.e2e_s.count, 4);
  EXPECT_NEAR(s.e2e_s.mean, (0.9 + 0.4 + 1.0 + 0.2) / 4, 1e-12);
}

TEST(BenchStatsTest, NothingFinished) {
  RequestRecord failed;
  failed.failure_code = "timeout";
  const BenchSummary s = Summarize({failed}, 0);
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.ttft_s.count, 0);
  EXPECT_EQ(s.request_throughput, 0);
  EXPECT_EQ(RunDuration({}), 0);
}

}  // namespace
}  // namespace millipede::loadgen
