#include "loadgen/prom_text.h"

#include <gtest/gtest.h>

#include <cmath>

namespace millipede::loadgen {
namespace {

TEST(PromTextTest, SamplesAndServiceGauges) {
  const char* page =
      "# HELP millipede_kv_cache_bytes KV cache bytes held.\n"
      "# TYPE millipede_kv_cache_bytes gauge\n"
      "millipede_kv_cache_bytes{rank=\"1\",tier=\"gpu\"} 4096\n"
      "millipede_kv_cache_bytes{rank=\"2\",tier=\"gpu\"} 1024 1700000000000\n"
      "millipede_requests_running 1\n"
      "millipede_requests_waiting 0\n"
      "millipede_ttft_seconds_bucket{le=\"+Inf\"} 3\n"
      "odd{label=\"a}b\"} +Inf\n"
      "millipede_decode_throughput_tokens_per_second{quantile=\"0.5\"} Nan\n"
      "\n";
  auto samples = ParsePrometheusText(page);
  ASSERT_TRUE(samples.ok()) << samples.status().ToString();
  ASSERT_EQ(samples->size(), 7u);
  EXPECT_TRUE(std::isnan((*samples)[6].value));
  EXPECT_EQ((*samples)[1].labels, "rank=\"2\",tier=\"gpu\"");
  EXPECT_EQ((*samples)[1].value, 1024);
  EXPECT_EQ((*samples)[5].labels, "label=\"a}b\"");
  EXPECT_TRUE(std::isinf((*samples)[5].value));

  Json g = ServiceGauges(*samples);
  EXPECT_EQ(g["kv_bytes_total"], 5120);
  EXPECT_EQ(g["requests_running"], 1);
  EXPECT_EQ(g["millipede_kv_cache_bytes"]["rank=\"1\",tier=\"gpu\""], 4096);
  EXPECT_FALSE(g.contains("millipede_ttft_seconds_bucket"));
  EXPECT_FALSE(ServiceIdle(g));
  for (PromSample& s : *samples) {
    if (s.name.rfind("millipede_", 0) == 0) s.value = 0;
  }
  EXPECT_TRUE(ServiceIdle(ServiceGauges(*samples)));
  EXPECT_FALSE(ServiceIdle(ServiceGauges({})));  // no series: unknown, not idle

  EXPECT_FALSE(ParsePrometheusText("metric\n").ok());
  EXPECT_FALSE(ParsePrometheusText("metric{a=\"1\" 3\n").ok());
  EXPECT_FALSE(ParsePrometheusText("metric one\n").ok());
}

}  // namespace
}  // namespace millipede::loadgen
