// The sweep's pure parts: rates and policies from the flags, and each policy's best run.
#include "loadgen/sweep.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

namespace millipede::loadgen {
namespace {

TEST(SweepTest, RatesArePositiveAndFinite) {
  auto rates = ParseSweepRates("0.5,2,8");
  ASSERT_TRUE(rates.ok()) << rates.status().ToString();
  EXPECT_EQ(*rates, (std::vector<double>{0.5, 2, 8}));
  for (const char* bad : {"", "1,,2", "0", "-1", "inf", "nan", "2x", "1,"})
    EXPECT_FALSE(ParseSweepRates(bad).ok()) << bad;
}

TEST(SweepTest, PoliciesReadTheirFiles) {
  const std::string path = ::testing::TempDir() + "sweep_policy_" + std::to_string(getpid());
  std::ofstream(path) << R"({"version": 1})";
  auto policies = ParseSweepPolicies("dense,omnikv=" + path);
  ASSERT_TRUE(policies.ok()) << policies.status().ToString();
  ASSERT_EQ(policies->size(), 2u);
  EXPECT_EQ((*policies)[0].name, "dense");
  EXPECT_EQ((*policies)[0].json, "");
  EXPECT_EQ((*policies)[1].name, "omnikv");
  EXPECT_EQ((*policies)[1].json, R"({"version": 1})");
  EXPECT_FALSE(ParseSweepPolicies("a,a").ok());
  EXPECT_FALSE(ParseSweepPolicies("=" + path).ok());
  EXPECT_FALSE(ParseSweepPolicies("a=").ok());
  EXPECT_FALSE(ParseSweepPolicies("a=/no/such/policy.json").ok());
  std::remove(path.c_str());
}

SweepRun MakeRun(const std::string& policy, double rate, double ttft_p50, double output_tps,
                 int64_t failed = 0) {
  SweepRun r{.policy = policy, .rate = rate, .summary = {}};
  r.summary.ok = 10;
  r.summary.failed = failed;
  r.summary.ttft_s.count = 10;
  r.summary.ttft_s.p50 = ttft_p50;
  r.summary.output_token_throughput = output_tps;
  return r;
}

TEST(SweepTest, EachPolicysBestIsItsHighestRateUnderTheLimit) {
  const std::vector<SweepRun> runs = {
      MakeRun("dense", 1, 0.2, 100),  MakeRun("dense", 2, 0.6, 190),
      MakeRun("dense", 4, 3.0, 250),  MakeRun("sparse", 1, 0.1, 100),
      MakeRun("sparse", 2, 0.3, 200), MakeRun("sparse", 4, 0.9, 300, 1),
      MakeRun("sparse", 3, 0.8, 285), MakeRun("slow", 1, 1.5, 90)};
  const std::vector<SweepBest> best = BestRuns(runs, 1.0);
  ASSERT_EQ(best.size(), 3u);
  EXPECT_EQ(best[0].policy, "dense");
  EXPECT_EQ(best[0].run, 1);  // 4 req/s is over the limit
  EXPECT_EQ(best[1].policy, "sparse");
  EXPECT_EQ(best[1].run, 6);  // 4 req/s had a failed request; 3 req/s is the best
  EXPECT_EQ(best[2].run, -1);
  const Json j = SweepJson(runs, 1.0);
  EXPECT_EQ(j["runs"].size(), runs.size());
  EXPECT_DOUBLE_EQ(j["best"][0]["rate"].get<double>(), 2);
  EXPECT_DOUBLE_EQ(j["best"][1]["vs_first"].get<double>(), 285.0 / 190.0);
  EXPECT_TRUE(j["best"][2]["rate"].is_null());
  EXPECT_TRUE(j["best"][2]["vs_first"].is_null());
  std::ostringstream table;
  PrintSweep(table, runs, 1.0);
  EXPECT_NE(table.str().find("sparse: 3.00 req/s, 285.0 output tok/s (1.50x"), std::string::npos)
      << table.str();
  EXPECT_NE(table.str().find("slow: none"), std::string::npos) << table.str();
}

}  // namespace
}  // namespace millipede::loadgen
