// ParallelFor: every item exactly once, on one thread below the work threshold, nested loops run
// serially; CpuThreads at least 1.
#include "kernels/cpu/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace millipede {
namespace {

TEST(ParallelTest, EveryItemOnce) {
  for (const int64_t n : {0, 1, 7, 1000}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    cpu::ParallelFor(n, 1e9, [&](int64_t i) { hits[static_cast<size_t>(i)]++; });
    for (const auto& h : hits) EXPECT_EQ(h.load(), 1);
  }
}

TEST(ParallelTest, SmallWorkStaysOnTheCallingThread) {
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<int> elsewhere{0};
  cpu::ParallelFor(64, cpu::kParallelMinWork / 2, [&](int64_t) {
    if (std::this_thread::get_id() != caller) elsewhere++;
  });
  EXPECT_EQ(elsewhere.load(), 0);
}

TEST(ParallelTest, NestedLoopsRunSerially) {
  std::vector<std::atomic<int>> hits(64);
  cpu::ParallelFor(8, 1e9, [&](int64_t i) {
    cpu::ParallelFor(8, 1e9, [&](int64_t j) { hits[static_cast<size_t>(i * 8 + j)]++; });
  });
  for (const auto& h : hits) EXPECT_EQ(h.load(), 1);
  EXPECT_GE(cpu::CpuThreads(), 1);
}

}  // namespace
}  // namespace millipede
