// ServiceMetrics: every call moves the numbers a Prometheus scrape of /metrics sees.
#include "monitoring/service_metrics.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "tests/monitoring/scrape_util.h"

namespace millipede {
namespace {

using scrape_test::HttpGet;
using scrape_test::ParseSamples;

int PortOf(const std::string& url) {
  size_t colon = url.rfind(':');
  return std::stoi(url.substr(colon + 1));
}

class ServiceMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto metrics = ServiceMetrics::Create("127.0.0.1:0");
    ASSERT_TRUE(metrics.ok()) << metrics.status().ToString();
    metrics_ = std::move(metrics).value();
  }

  // Scrapes /metrics and returns series -> value; fails the test on a bad response.
  std::map<std::string, double> Scrape() {
    auto response = HttpGet(PortOf(metrics_->url()), "/metrics");
    EXPECT_TRUE(response.ok()) << response.status().ToString();
    if (!response.ok()) return {};
    EXPECT_EQ(response->rfind("HTTP/1.1 200", 0), 0u) << response->substr(0, 80);
    size_t body = response->find("\r\n\r\n");
    EXPECT_NE(body, std::string::npos);
    return ParseSamples(response->substr(body == std::string::npos ? 0 : body + 4));
  }

  std::unique_ptr<ServiceMetrics> metrics_;
};

TEST_F(ServiceMetricsTest, UrlNamesTheBoundPort) {
  const std::string url = metrics_->url();
  EXPECT_EQ(url.rfind("http://127.0.0.1:", 0), 0u) << url;
  EXPECT_EQ(url.substr(url.size() - 8), "/metrics");
  EXPECT_GT(PortOf(url), 0);
}

TEST_F(ServiceMetricsTest, ExposesEveryFamilyBeforeAnyJob) {
  auto s = Scrape();
  for (const char* series : {"millipede_requests_running",
                             "millipede_requests_waiting",
                             "millipede_prompt_tokens_total",
                             "millipede_generation_tokens_total",
                             "millipede_prefill_progress_ratio",
                             "millipede_time_to_first_token_seconds_count",
                             "millipede_time_per_output_token_seconds_count",
                             "millipede_e2e_request_latency_seconds_count",
                             "millipede_queue_time_seconds_count",
                             "millipede_prefill_throughput_tokens_per_second_count",
                             "millipede_decode_throughput_tokens_per_second_count",
                             "millipede_prefill_attention_density_count",
                             "millipede_decode_step_seconds_count",
                             "millipede_itl_target_misses_total",
                             "millipede_decode_prefill_wait_seconds_total",
                             "millipede_prefill_work_bound_pairs",
                             "millipede_request_finished_total{reason=\"stop\"}",
                             "millipede_request_finished_total{reason=\"cancelled\"}",
                             "millipede_request_errors_total{reason=\"queue_full\"}",
                             "millipede_request_errors_total{reason=\"too_long\"}"}) {
    ASSERT_TRUE(s.count(series)) << series;
    EXPECT_EQ(s[series], 0) << series;
  }
  // TTFT buckets reach one hour.
  EXPECT_TRUE(s.count("millipede_time_to_first_token_seconds_bucket{le=\"3600\"}"));
}

TEST_F(ServiceMetricsTest, JobLifecycleMovesTheNumbers) {
  metrics_->JobQueued();
  metrics_->JobQueued();
  auto s = Scrape();
  EXPECT_EQ(s["millipede_requests_waiting"], 2);
  EXPECT_EQ(s["millipede_requests_running"], 0);

  metrics_->JobStarted(0.25);
  metrics_->PromptTokens(300);
  metrics_->PrefillProgress(0.3);
  s = Scrape();
  EXPECT_EQ(s["millipede_requests_waiting"], 1);
  EXPECT_EQ(s["millipede_requests_running"], 1);
  EXPECT_EQ(s["millipede_queue_time_seconds_count"], 1);
  EXPECT_DOUBLE_EQ(s["millipede_queue_time_seconds_sum"], 0.25);
  EXPECT_EQ(s["millipede_queue_time_seconds_bucket{le=\"0.3\"}"], 1);
  EXPECT_EQ(s["millipede_queue_time_seconds_bucket{le=\"0.1\"}"], 0);
  EXPECT_DOUBLE_EQ(s["millipede_prefill_progress_ratio"], 0.3);
  EXPECT_EQ(s["millipede_prompt_tokens_total"], 300);

  metrics_->PromptTokens(700);
  metrics_->PrefillProgress(1.0);
  metrics_->FirstToken(1.5, 800.0);
  metrics_->PrefillDensity(0.25);
  metrics_->OutputToken(0);
  metrics_->OutputToken(0.02);
  metrics_->OutputToken(0.04);
  s = Scrape();
  EXPECT_EQ(s["millipede_prompt_tokens_total"], 1000);
  EXPECT_DOUBLE_EQ(s["millipede_prefill_progress_ratio"], 1.0);
  EXPECT_EQ(s["millipede_time_to_first_token_seconds_count"], 1);
  EXPECT_DOUBLE_EQ(s["millipede_time_to_first_token_seconds_sum"], 1.5);
  EXPECT_EQ(s["millipede_prefill_throughput_tokens_per_second_count"], 1);
  EXPECT_EQ(s["millipede_prefill_attention_density_count"], 1);
  EXPECT_EQ(s["millipede_prefill_attention_density_bucket{le=\"0.2\"}"], 0);
  EXPECT_EQ(s["millipede_prefill_attention_density_bucket{le=\"0.3\"}"], 1);
  EXPECT_EQ(s["millipede_generation_tokens_total"], 3);
  // The first token has no predecessor: two gaps observed.
  EXPECT_EQ(s["millipede_time_per_output_token_seconds_count"], 2);
  EXPECT_NEAR(s["millipede_time_per_output_token_seconds_sum"], 0.06, 1e-12);

  metrics_->JobFinished("length", /*started=*/true, 2.0, 40.0);
  metrics_->JobFinished("cancelled", /*started=*/false, 0.5, 0.0);
  metrics_->PrefillProgress(0.0);  // the scheduler's report once no prompt is in prefill
  s = Scrape();
  EXPECT_EQ(s["millipede_requests_running"], 0);
  EXPECT_EQ(s["millipede_requests_waiting"], 0);
  EXPECT_DOUBLE_EQ(s["millipede_prefill_progress_ratio"], 0.0);  // no job runs
  EXPECT_EQ(s["millipede_request_finished_total{reason=\"length\"}"], 1);
  EXPECT_EQ(s["millipede_request_finished_total{reason=\"cancelled\"}"], 1);
  EXPECT_EQ(s["millipede_request_finished_total{reason=\"stop\"}"], 0);
  EXPECT_EQ(s["millipede_e2e_request_latency_seconds_count"], 2);
  EXPECT_DOUBLE_EQ(s["millipede_e2e_request_latency_seconds_sum"], 2.5);
  // Only the job that decoded reports a decode throughput.
  EXPECT_EQ(s["millipede_decode_throughput_tokens_per_second_count"], 1);
  EXPECT_DOUBLE_EQ(s["millipede_decode_throughput_tokens_per_second_sum"], 40.0);
}

TEST_F(ServiceMetricsTest, StepsAndKvWaits) {
  metrics_->JobQueued();
  metrics_->JobStarted(0);
  metrics_->StepRun(/*decode_tokens=*/0, /*prefill_tokens=*/300);
  metrics_->KvReserved(400);
  metrics_->StepRun(24, 0);
  metrics_->KvReserved(900);
  metrics_->JobRequeued();
  metrics_->KvAdmissionWaits(0);
  metrics_->KvAdmissionWaits(2);
  auto s = Scrape();
  EXPECT_EQ(s["millipede_batch_size_count"], 1);  // steps without decode tokens are not counted
  EXPECT_EQ(s["millipede_batch_size_sum"], 24);
  EXPECT_EQ(s["millipede_batch_size_bucket{le=\"16\"}"], 0);
  EXPECT_EQ(s["millipede_batch_size_bucket{le=\"32\"}"], 1);
  EXPECT_EQ(s["millipede_prefill_chunk_tokens_count"], 2);
  EXPECT_EQ(s["millipede_prefill_chunk_tokens_sum"], 300);
  EXPECT_EQ(s["millipede_kv_reserved_positions"], 900);
  // Counted by KvAdmissionWaits, not by the requeue itself (the step scheduler counts a
  // requeued job as one that waits for KV).
  EXPECT_EQ(s["millipede_kv_admission_waits_total"], 2);
  EXPECT_EQ(s["millipede_requests_running"], 0);
  EXPECT_EQ(s["millipede_requests_waiting"], 1);
}

TEST_F(ServiceMetricsTest, DecodeStepsAgainstTheLatencyTarget) {
  auto s = Scrape();
  EXPECT_EQ(s["millipede_itl_target_misses_total"], 0);
  EXPECT_EQ(s["millipede_prefill_work_bound_pairs"], 0);
  metrics_->DecodeStep(0.030, 0.060, 0);
  metrics_->DecodeStep(0.080, 0.060, 0.045);  // a miss, 45 ms of it for prefill
  metrics_->DecodeStep(0.200, 0, 0.1);        // no target: no miss
  metrics_->PrefillWorkBound(123456789);
  s = Scrape();
  EXPECT_EQ(s["millipede_decode_step_seconds_count"], 3);
  EXPECT_NEAR(s["millipede_decode_step_seconds_sum"], 0.31, 1e-9);
  EXPECT_EQ(s["millipede_itl_target_misses_total"], 1);
  EXPECT_NEAR(s["millipede_decode_prefill_wait_seconds_total"], 0.145, 1e-9);
  EXPECT_EQ(s["millipede_prefill_work_bound_pairs"], 123456789);
  metrics_->PrefillWorkBound(-3);
  EXPECT_EQ(Scrape()["millipede_prefill_work_bound_pairs"], 0);
}

TEST_F(ServiceMetricsTest, DecodeBatchesByStrategy) {
  metrics_->DecodeBatch("full", 24);
  metrics_->DecodeBatch("omnikv", 3);
  metrics_->DecodeBatch("omnikv", 5);
  metrics_->DecodeBatch("omnikv", 0);  // nothing decoded: not observed
  auto s = Scrape();
  EXPECT_EQ(s["millipede_decode_batch_size_count{decode=\"full\"}"], 1);
  EXPECT_EQ(s["millipede_decode_batch_size_sum{decode=\"full\"}"], 24);
  EXPECT_EQ(s["millipede_decode_batch_size_count{decode=\"omnikv\"}"], 2);
  EXPECT_EQ(s["millipede_decode_batch_size_bucket{decode=\"omnikv\",le=\"4\"}"], 1);
  // The series are bounded: a ninth name is dropped.
  for (int i = 0; i < 10; ++i) metrics_->DecodeBatch("x" + std::to_string(i), 1);
  s = Scrape();
  EXPECT_TRUE(s.count("millipede_decode_batch_size_count{decode=\"x5\"}"));
  EXPECT_FALSE(s.count("millipede_decode_batch_size_count{decode=\"x6\"}"));
}

TEST_F(ServiceMetricsTest, ErrorsByReasonAndUnknownReasonsAreBounded) {
  metrics_->RequestError("queue_full");
  metrics_->RequestError("queue_full");
  metrics_->RequestError("too_long");
  metrics_->RequestError("something-a-client-made-up");
  auto s = Scrape();
  EXPECT_EQ(s["millipede_request_errors_total{reason=\"queue_full\"}"], 2);
  EXPECT_EQ(s["millipede_request_errors_total{reason=\"too_long\"}"], 1);
  EXPECT_EQ(s["millipede_request_errors_total{reason=\"other\"}"], 1);
  EXPECT_FALSE(s.count("millipede_request_errors_total{reason=\"something-a-client-made-up\"}"));
  // The front ends' refusal reasons each have their own series, exposed before any refusal.
  for (const char* reason : {"too_large", "unsupported", "unauthorized", "not_found",
                             "method_not_allowed", "unsupported_media_type"}) {
    const std::string series =
        std::string("millipede_request_errors_total{reason=\"") + reason + "\"}";
    ASSERT_TRUE(s.count(series)) << series;
    EXPECT_EQ(s[series], 0) << series;
    metrics_->RequestError(reason);
    EXPECT_EQ(Scrape()[series], 1) << series;
  }
  EXPECT_EQ(Scrape()["millipede_request_errors_total{reason=\"other\"}"], 1);
}

TEST_F(ServiceMetricsTest, RankStatsBecomeGaugesAndMonotonicCounters) {
  RankStats r1{.rank = 1,
               .kv_bytes_gpu = 4096,
               .kv_bytes_host = 1 << 20,
               .attention_s = 1.5,
               .comm_s = 0.5,
               .comm_bytes = 1000};
  RankStats r2{.rank = 2,
               .kv_bytes_gpu = 2048,
               .kv_bytes_host = 0,
               .attention_s = 2.0,
               .comm_s = 0.25,
               .comm_bytes = 500};
  metrics_->UpdateRank(r1);
  metrics_->UpdateRank(r2);
  auto s = Scrape();
  EXPECT_EQ(s["millipede_kv_cache_bytes{rank=\"1\",tier=\"gpu\"}"], 4096);
  EXPECT_EQ(s["millipede_kv_cache_bytes{rank=\"1\",tier=\"host\"}"], 1 << 20);
  EXPECT_EQ(s["millipede_kv_cache_bytes{rank=\"2\",tier=\"gpu\"}"], 2048);
  EXPECT_DOUBLE_EQ(s["millipede_attention_seconds_total{rank=\"2\"}"], 2.0);
  EXPECT_DOUBLE_EQ(s["millipede_communication_seconds_total{rank=\"1\"}"], 0.5);
  EXPECT_EQ(s["millipede_communication_bytes_total{rank=\"1\"}"], 1000);

  // Cumulative values advance the counters; KV gauges follow the latest report.
  r1.kv_bytes_gpu = 0;
  r1.attention_s = 4.0;
  r1.comm_bytes = 3000;
  metrics_->UpdateRank(r1);
  s = Scrape();
  EXPECT_EQ(s["millipede_kv_cache_bytes{rank=\"1\",tier=\"gpu\"}"], 0);
  EXPECT_DOUBLE_EQ(s["millipede_attention_seconds_total{rank=\"1\"}"], 4.0);
  EXPECT_EQ(s["millipede_communication_bytes_total{rank=\"1\"}"], 3000);

  // A restarted worker reports from zero again: the counter keeps growing, never drops.
  r1.comm_bytes = 100;
  metrics_->UpdateRank(r1);
  s = Scrape();
  EXPECT_EQ(s["millipede_communication_bytes_total{rank=\"1\"}"], 3100);

  // Absurd ranks create no series.
  metrics_->UpdateRank(RankStats{.rank = -3});
  s = Scrape();
  EXPECT_FALSE(s.count("millipede_kv_cache_bytes{rank=\"-3\",tier=\"gpu\"}"));
}

TEST(ServiceMetricsCreateTest, BadAddressesAreClearErrors) {
  for (const char* address :
       {"", "127.0.0.1", "127.0.0.1:", ":80", "127.0.0.1:99999", "127.0.0.1:http"}) {
    auto metrics = ServiceMetrics::Create(address);
    ASSERT_FALSE(metrics.ok()) << address;
    EXPECT_EQ(metrics.status().code(), StatusCode::kInvalidArgument) << address;
    EXPECT_NE(metrics.status().message().find("HOST:PORT"), std::string::npos);
  }
}

TEST(ServiceMetricsCreateTest, PortInUseIsAnIoError) {
  auto first = ServiceMetrics::Create("127.0.0.1:0");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  std::string url = (*first)->url();
  std::string port = url.substr(url.rfind(':') + 1);
  port = port.substr(0, port.find('/'));
  auto second = ServiceMetrics::Create("127.0.0.1:" + port);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kIoError);
}

}  // namespace
}  // namespace millipede
