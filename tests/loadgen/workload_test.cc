#include "loadgen/workload.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

namespace millipede::loadgen {
namespace {

WorkloadOptions Options(int64_t n, double rate, ArrivalProcess process) {
  WorkloadOptions o;
  o.num_requests = n;
  o.rate = rate;
  o.process = process;
  o.lengths.prompt = {10, 10};
  o.lengths.output = {4, 4};
  return o;
}

std::vector<PlannedRequest> Plan(const WorkloadOptions& o) {
  auto plan = PlanWorkload(o);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  return plan.ok() ? *plan : std::vector<PlannedRequest>{};
}

TEST(WorkloadTest, FixedRateAndAllAtOnce) {
  auto fixed = Plan(Options(5, 4, ArrivalProcess::kFixed));
  ASSERT_EQ(fixed.size(), 5u);
  for (size_t i = 0; i < fixed.size(); ++i) {
    EXPECT_DOUBLE_EQ(fixed[i].send_at_s, static_cast<double>(i) / 4);
    EXPECT_EQ(fixed[i].index, static_cast<int64_t>(i));
    EXPECT_FALSE(fixed[i].placed);
    EXPECT_FALSE(fixed[i].cancel_after_tokens);
  }
  for (const auto& r : Plan(Options(7, INFINITY, ArrivalProcess::kPoisson))) {
    EXPECT_EQ(r.send_at_s, 0);
  }
}

TEST(WorkloadTest, DurationStopsTheArrivals) {
  WorkloadOptions o = Options(0, 10, ArrivalProcess::kFixed);
  o.num_requests.reset();
  o.duration_s = 1.0;
  EXPECT_EQ(Plan(o).size(), 10u);  // 0, 0.1, ..., 0.9
  o.num_requests = 3;              // whichever comes first
  EXPECT_EQ(Plan(o).size(), 3u);
}

TEST(WorkloadTest, PoissonGapsHaveTheRatesMeanAndSpread) {
  const int n = 20000;
  auto plan = Plan(Options(n, 50, ArrivalProcess::kPoisson));
  ASSERT_EQ(plan.size(), static_cast<size_t>(n));
  double sum = 0, sum_sq = 0;
  for (int i = 1; i < n; ++i) {
    const double gap = plan[i].send_at_s - plan[i - 1].send_at_s;
    ASSERT_GE(gap, 0);
    sum += gap;
    sum_sq += gap * gap;
  }
  const double mean = sum / (n - 1);
  const double sd = std::sqrt(sum_sq / (n - 1) - mean * mean);
  EXPECT_NEAR(mean, 1.0 / 50, 0.03 / 50);
  EXPECT_NEAR(sd / mean, 1.0, 0.05);  // exponential: standard deviation = mean

  WorkloadOptions other = Options(n, 50, ArrivalProcess::kPoisson);
  auto again = Plan(other);
  other.seed = 1;
  auto reseeded = Plan(other);
  EXPECT_EQ(again[100].send_at_s, plan[100].send_at_s);
  EXPECT_NE(reseeded[100].send_at_s, plan[100].send_at_s);
}

TEST(WorkloadTest, UniformLengthsCoverTheirRange) {
  WorkloadOptions o = Options(4000, INFINITY, ArrivalProcess::kPoisson);
  o.lengths.prompt = {5, 9};
  o.lengths.output = {1, 3};
  std::set<int64_t> prompts, outputs;
  for (const auto& r : Plan(o)) {
    prompts.insert(r.prompt_tokens);
    outputs.insert(r.output_tokens);
  }
  EXPECT_EQ(prompts, (std::set<int64_t>{5, 6, 7, 8, 9}));
  EXPECT_EQ(outputs, (std::set<int64_t>{1, 2, 3}));
}

TEST(WorkloadTest, MixDrawsClassesByWeight) {
  WorkloadOptions o = Options(8000, INFINITY, ArrivalProcess::kPoisson);
  o.lengths.mix = {{1, 500, 8}, {3, 20, 2}};
  int long_ones = 0;
  for (const auto& r : Plan(o)) {
    ASSERT_TRUE((r.prompt_tokens == 500 && r.output_tokens == 8) ||
                (r.prompt_tokens == 20 && r.output_tokens == 2));
    long_ones += r.prompt_tokens == 500;
  }
  EXPECT_NEAR(long_ones / 8000.0, 0.25, 0.02);
}

TEST(WorkloadTest, PlacedRequestsJoinInTimeOrder) {
  WorkloadOptions o = Options(4, 2, ArrivalProcess::kFixed);  // 0, 0.5, 1, 1.5
  o.placed = {{0.75, 1000, 16}, {0, 2000, 8}};
  auto plan = Plan(o);
  ASSERT_EQ(plan.size(), 6u);
  EXPECT_TRUE(plan[0].placed);  // a tie at 0: the placed one first
  EXPECT_EQ(plan[0].prompt_tokens, 2000);
  EXPECT_FALSE(plan[1].placed);
  EXPECT_TRUE(plan[3].placed);
  EXPECT_EQ(plan[3].send_at_s, 0.75);
  EXPECT_EQ(plan[3].output_tokens, 16);
  for (size_t i = 0; i < plan.size(); ++i) EXPECT_EQ(plan[i].index, static_cast<int64_t>(i));
}

TEST(WorkloadTest, CancelsTakeTheShareAtPointsBeforeTheLastToken) {
  WorkloadOptions o = Options(24, INFINITY, ArrivalProcess::kPoisson);
  o.lengths.output = {1, 6};
  o.cancel_fraction = 0.25;
  int cancelled = 0;
  std::set<int64_t> points;
  for (const auto& r : Plan(o)) {
    if (!r.cancel_after_tokens) continue;
    ++cancelled;
    EXPECT_GE(*r.cancel_after_tokens, 0);
    EXPECT_LT(*r.cancel_after_tokens, r.output_tokens);
    points.insert(*r.cancel_after_tokens);
  }
  EXPECT_EQ(cancelled, 6);
  o.num_requests = 400;
  points.clear();
  for (const auto& r : Plan(o)) {
    if (r.cancel_after_tokens) points.insert(*r.cancel_after_tokens);
  }
  EXPECT_EQ(points, (std::set<int64_t>{0, 1, 2, 3, 4, 5}));
  o.cancel_fraction = 1;
  for (const auto& r : Plan(o)) EXPECT_TRUE(r.cancel_after_tokens);
}

TEST(WorkloadTest, PromptIdsAreSeededPerRequestAndInTheVocabulary) {
  auto a = PromptIds(7, 3, 5000, 100);
  ASSERT_EQ(a.size(), 5000u);
  std::set<int32_t> seen(a.begin(), a.end());
  EXPECT_EQ(*seen.begin(), 0);
  EXPECT_EQ(*seen.rbegin(), 99);
  EXPECT_EQ(seen.size(), 100u);
  EXPECT_EQ(PromptIds(7, 3, 5000, 100), a);
  EXPECT_NE(PromptIds(7, 4, 5000, 100), a);
  EXPECT_NE(PromptIds(8, 3, 5000, 100), a);
  // A longer prompt of the same request starts with the shorter one.
  auto longer = PromptIds(7, 3, 6000, 100);
  EXPECT_TRUE(std::equal(a.begin(), a.end(), longer.begin()));
}

// Shared documents: about the share of the arrivals start with one, every document is drawn,
// and requests about one document share its ids and then differ.
TEST(WorkloadTest, DocumentsTakeTheirShareAndShareTheirIds) {
  WorkloadOptions o = Options(2000, INFINITY, ArrivalProcess::kPoisson);
  o.documents = {.count = 3, .tokens = 50, .share = 0.8};
  auto plan = Plan(o);
  ASSERT_EQ(plan.size(), 2000u);
  int64_t about = 0;
  std::set<int64_t> documents;
  for (const PlannedRequest& r : plan) {
    if (r.document < 0) {
      EXPECT_EQ(r.prompt_tokens, 10);
      continue;
    }
    ++about;
    documents.insert(r.document);
    EXPECT_LT(r.document, 3);
    EXPECT_EQ(r.prompt_tokens, 60);
  }
  EXPECT_NEAR(static_cast<double>(about) / 2000.0, 0.8, 0.04);
  EXPECT_EQ(documents.size(), 3u);
  // The first two requests about one document: the same 50 ids, then their own 10.
  auto about_doc = [&](int64_t document, size_t from) {
    for (size_t i = from; i < plan.size(); ++i)
      if (plan[i].document == document || (document < 0 && plan[i].document >= 0)) return i;
    return plan.size();
  };
  const size_t i = about_doc(-1, 0);
  ASSERT_LT(i, plan.size());
  const size_t j = about_doc(plan[i].document, i + 1);
  ASSERT_LT(j, plan.size());
  const auto a = RequestPromptIds(1, plan[i], 50, 1000), b = RequestPromptIds(1, plan[j], 50, 1000);
  ASSERT_EQ(a.size(), 60u);
  ASSERT_EQ(b.size(), 60u);
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + 50, b.begin()));
  EXPECT_FALSE(std::equal(a.begin() + 50, a.end(), b.begin() + 50));
  // Another document's ids differ.
  const size_t k = about_doc((plan[i].document + 1) % 3, 0);
  ASSERT_LT(k, plan.size());
  const auto c = RequestPromptIds(1, plan[k], 50, 1000);
  EXPECT_FALSE(std::equal(a.begin(), a.begin() + 50, c.begin()));
  // A fresh prompt is the request's own ids, as before documents existed.
  PlannedRequest fresh;
  fresh.index = 5;
  fresh.prompt_tokens = 10;
  EXPECT_EQ(RequestPromptIds(1, fresh, 50, 1000), PromptIds(1, 5, 10, 1000));
  // No documents, no change to the plan.
  o.documents = {};
  for (const PlannedRequest& r : Plan(o)) EXPECT_EQ(r.document, -1);
  o.documents = {.count = 2, .tokens = 0};
  EXPECT_FALSE(ValidateWorkload(o).ok());
  o.documents = {.count = 2, .tokens = 5, .share = 1.5};
  EXPECT_FALSE(ValidateWorkload(o).ok());
}

// --warm-documents: one request about each document, each with its own ids after the document's
// (apart from the load's requests), one output token.
TEST(WorkloadTest, WarmUpAsksAboutEveryDocumentOnce) {
  WorkloadOptions o = Options(20, INFINITY, ArrivalProcess::kPoisson);
  o.documents = {.count = 3, .tokens = 50, .share = 1};
  o.lengths.mix = {{1, 30, 4}, {1, 12, 4}};
  const std::vector<PlannedRequest> warm = WarmUpPlan(o);
  ASSERT_EQ(warm.size(), 3u);
  const std::vector<PlannedRequest> plan = Plan(o);
  for (int64_t d = 0; d < 3; ++d) {
    const PlannedRequest& r = warm[static_cast<size_t>(d)];
    EXPECT_EQ(r.document, d);
    EXPECT_EQ(r.prompt_tokens, 62);  // the document and the shortest prompt of the mix
    EXPECT_EQ(r.output_tokens, 1);
    EXPECT_EQ(r.send_at_s, 0);
    const auto ids = RequestPromptIds(2, r, 50, 1000);
    for (const PlannedRequest& q : plan) {
      if (q.document != d) continue;
      const auto load = RequestPromptIds(2, q, 50, 1000);
      EXPECT_TRUE(std::equal(ids.begin(), ids.begin() + 50, load.begin()));
      EXPECT_FALSE(std::equal(ids.begin() + 50, ids.end(), load.begin() + 50));
    }
  }
  o.documents = {};
  EXPECT_TRUE(WarmUpPlan(o).empty());
}

TEST(WorkloadTest, Parsers) {
  auto docs = ParseDocuments("4:131072");
  ASSERT_TRUE(docs.ok()) << docs.status().ToString();
  EXPECT_EQ(docs->count, 4);
  EXPECT_EQ(docs->tokens, 131072);
  for (const char* bad : {"", "4", "0:10", "2:0", "a:1", "1:2:3"}) {
    EXPECT_FALSE(ParseDocuments(bad).ok()) << bad;
  }
  EXPECT_EQ(ParseLengthRange("12", "x")->lo, 12);
  EXPECT_EQ(ParseLengthRange("3:9", "x")->hi, 9);
  for (const char* bad : {"", "0", "9:3", "a", "1:2:3", "-4"}) {
    EXPECT_FALSE(ParseLengthRange(bad, "--prompt-len").ok()) << bad;
  }
  auto mix = ParseLengthMix("1:512000:64,200:1000:64");
  ASSERT_TRUE(mix.ok()) << mix.status().ToString();
  ASSERT_EQ(mix->size(), 2u);
  EXPECT_EQ((*mix)[0].prompt_tokens, 512000);
  EXPECT_EQ((*mix)[1].weight, 200);
  for (const char* bad : {"", "1:2", "0:5:5", "1:0:4", "1:5:5,", "x:1:1"}) {
    EXPECT_FALSE(ParseLengthMix(bad).ok()) << bad;
  }
  auto placed = ParsePlacedRequest("2.5:4096:32");
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(placed->at_s, 2.5);
  EXPECT_FALSE(ParsePlacedRequest("-1:5:5").ok());
  EXPECT_FALSE(ParsePlacedRequest("1:5").ok());
  EXPECT_TRUE(std::isinf(*ParseRate("inf")));
  EXPECT_EQ(*ParseRate("2.5"), 2.5);
  EXPECT_FALSE(ParseRate("0").ok());
  EXPECT_FALSE(ParseRate("fast").ok());
}

TEST(WorkloadTest, ValidationNamesTheProblem) {
  WorkloadOptions o = Options(4, 1, ArrivalProcess::kPoisson);
  o.num_requests.reset();
  EXPECT_NE(ValidateWorkload(o).message().find("number of requests or a duration"),
            std::string::npos);
  o.duration_s = 5;
  o.rate = INFINITY;
  EXPECT_NE(ValidateWorkload(o).message().find("finite rate"), std::string::npos);
  o = Options(4, 1, ArrivalProcess::kPoisson);
  o.cancel_fraction = 1.5;
  EXPECT_FALSE(ValidateWorkload(o).ok());
  o = Options(4, -1, ArrivalProcess::kPoisson);
  EXPECT_FALSE(PlanWorkload(o).ok());
}

}  // namespace
}  // namespace millipede::loadgen
