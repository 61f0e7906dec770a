// GlobalTopK under mpirun (2 and 3 ranks): every rank draws the same candidates, keeps its share
// and must learn exactly which of its own are in the top k of a sort of all of them; ranks or
// groups without candidates, k beyond the total, ties; bad input on one rank fails every rank
// (none left waiting).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "tests/worker/dist/global_top_k_test_util.h"
#include "worker/dist/global_top_k.h"
#include "worker/dist/mpi_communicator.h"

namespace millipede {
namespace {

using testing::Scores;
using testing::TopKScenario;

std::unique_ptr<Communicator> World() {
  auto comm = CreateMpiCommunicator(MPI_COMM_WORLD);
  EXPECT_TRUE(comm.ok()) << comm.status().ToString();
  return std::move(comm).value();
}

TEST(GlobalTopKMpiTest, MatchesASortOfAllScores) {
  auto comm = World();
  uint64_t seed = 10;
  for (Scores scores : {Scores::kUniform, Scores::kTies, Scores::kWithInfinities})
    for (int64_t k : {1, 5, 64, 299, 300, 5000}) {
      TopKScenario s;
      s.ranks = comm->size();
      s.num_groups = 3;
      s.positions = 300;
      s.k = k;
      s.scores = scores;
      s.seed = ++seed;
      testing::ExpectMatchesOracle(*comm, s);
    }
}

TEST(GlobalTopKMpiTest, RanksAndGroupsWithoutCandidates) {
  auto comm = World();
  for (int empty_rank = 0; empty_rank < comm->size(); ++empty_rank) {
    TopKScenario s;
    s.ranks = comm->size();
    s.num_groups = 4;
    s.positions = 40;
    s.k = 10;
    s.scores = Scores::kTies;
    s.empty_rank = empty_rank;
    s.empty_group = 1;
    s.seed = 100 + static_cast<uint64_t>(empty_rank);
    testing::ExpectMatchesOracle(*comm, s);
  }
  TopKScenario nothing;
  nothing.ranks = comm->size();
  nothing.num_groups = 2;
  nothing.positions = 0;
  nothing.k = 4;
  testing::ExpectMatchesOracle(*comm, nothing);
}

TEST(GlobalTopKMpiTest, BadInputOnOneRankFailsEveryRank) {
  auto comm = World();
  const float score = comm->rank() == comm->size() - 1 ? std::nanf("") : 1.0f;
  const std::vector<GlobalTopKCandidate> c{{score, comm->rank()}};
  const std::vector<int64_t> offsets{0, 1};
  EXPECT_EQ(GlobalTopK(*comm, c, offsets, 1).status().code(), StatusCode::kInvalidArgument);
  // A different k on one rank.
  const std::vector<GlobalTopKCandidate> ok{{1.0f, comm->rank()}};
  const int64_t k = comm->rank() == 0 ? 2 : 1;
  if (comm->size() > 1) {
    EXPECT_EQ(GlobalTopK(*comm, ok, offsets, k).status().code(), StatusCode::kInvalidArgument);
  }
  // Still usable afterwards: every rank left both calls at the same point.
  auto r = GlobalTopK(*comm, ok, offsets, 1);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->keep[0], comm->rank() == 0 ? 1 : 0);
}

}  // namespace
}  // namespace millipede
