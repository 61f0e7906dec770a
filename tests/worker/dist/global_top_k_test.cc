// GlobalTopK in one process (the local communicator): against a sort of all scores, by hand, and
// its input checks. The same scenarios run under mpirun in global_top_k_mpi_test.cc.
#include "worker/dist/global_top_k.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "tests/worker/dist/global_top_k_test_util.h"

namespace millipede {
namespace {

using testing::Scores;
using testing::TopKScenario;

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(GlobalTopKTest, KeepsTheBestWithTiesToTheLowerPosition) {
  auto comm = CreateLocalCommunicator();
  // Group 0: scores 2 @ 9, 5 @ 4, 2 @ 1, -inf @ 0; group 1: none; group 2: 1 @ 7.
  const std::vector<GlobalTopKCandidate> c{{2, 9}, {5, 4}, {2, 1}, {-kInf, 0}, {1, 7}};
  const std::vector<int64_t> offsets{0, 4, 4, 5};
  auto r = GlobalTopK(*comm, c, offsets, 2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->keep, (std::vector<uint8_t>{0, 1, 1, 0, 1}));
  ASSERT_EQ(r->cuts.size(), 3u);
  EXPECT_EQ(r->cuts[0].kept, 2);
  EXPECT_EQ(r->cuts[0].last.score, 2.0f);
  EXPECT_EQ(r->cuts[0].last.position, 1);
  EXPECT_EQ(r->cuts[1].kept, 0);
  EXPECT_FALSE(r->cuts[1].Keeps({kInf, 0}));
  EXPECT_EQ(r->cuts[2].kept, 1);
  // k beyond every group's size keeps everything, the -inf candidate included.
  auto all = GlobalTopK(*comm, c, offsets, 10);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->keep, (std::vector<uint8_t>{1, 1, 1, 1, 1}));
  EXPECT_EQ(all->cuts[0].kept, 4);
  // k = 0 keeps nothing.
  auto none = GlobalTopK(*comm, c, offsets, 0);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->keep, (std::vector<uint8_t>{0, 0, 0, 0, 0}));
}

TEST(GlobalTopKTest, MatchesASortOfAllScores) {
  auto comm = CreateLocalCommunicator();
  for (Scores scores : {Scores::kUniform, Scores::kTies, Scores::kWithInfinities})
    for (int64_t k : {1, 7, 50, 199, 200, 1000}) {
      TopKScenario s;
      s.num_groups = 4;
      s.positions = 200;
      s.k = k;
      s.scores = scores;
      s.empty_group = 2;
      s.seed = static_cast<uint64_t>(k) * 3 + static_cast<uint64_t>(scores);
      testing::ExpectMatchesOracle(*comm, s);
    }
}

TEST(GlobalTopKTest, NoCandidatesAnywhere) {
  auto comm = CreateLocalCommunicator();
  const std::vector<int64_t> offsets{0, 0, 0};
  auto r = GlobalTopK(*comm, {}, offsets, 3);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->cuts.size(), 2u);
  EXPECT_EQ(r->cuts[0].kept, 0);
  EXPECT_TRUE(r->keep.empty());
  const std::vector<int64_t> no_groups{0};
  auto zero = GlobalTopK(*comm, {}, no_groups, 3);
  ASSERT_TRUE(zero.ok());
  EXPECT_TRUE(zero->cuts.empty());
}

TEST(GlobalTopKTest, RejectsBadInput) {
  auto comm = CreateLocalCommunicator();
  const std::vector<GlobalTopKCandidate> c{{1, 0}, {2, 1}, {3, 2}};
  const std::vector<int64_t> offsets{0, 3};
  EXPECT_EQ(GlobalTopK(*comm, c, offsets, -1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(GlobalTopK(*comm, c, std::vector<int64_t>{0, 2}, 1).ok());        // short
  EXPECT_FALSE(GlobalTopK(*comm, c, std::vector<int64_t>{0, 2, 1, 3}, 1).ok());  // decreasing
  EXPECT_FALSE(GlobalTopK(*comm, c, std::vector<int64_t>{}, 1).ok());
  const std::vector<GlobalTopKCandidate> nan{{1, 0}, {std::nanf(""), 1}};
  EXPECT_FALSE(GlobalTopK(*comm, nan, std::vector<int64_t>{0, 2}, 1).ok());
  const std::vector<GlobalTopKCandidate> repeated{{1, 5}, {2, 5}};
  auto r = GlobalTopK(*comm, repeated, std::vector<int64_t>{0, 2}, 2);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("position 5 appears twice"), std::string::npos)
      << r.status().ToString();
  // The same position in two groups is fine.
  EXPECT_TRUE(GlobalTopK(*comm, repeated, std::vector<int64_t>{0, 1, 2}, 2).ok());
}

}  // namespace
}  // namespace millipede
