// ParallelCopy copies every byte, whatever the size and thread count, and no byte beyond.
#include "common/parallel_copy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace millipede {
namespace {

std::vector<uint8_t> Pattern(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  return v;
}

TEST(ParallelCopyTest, CopiesEveryByteOfOddSizesOnAnyNumberOfThreads) {
  for (const size_t n :
       {size_t{0}, size_t{1}, size_t{4095}, size_t{4097}, 3 * kParallelCopyMinBytes + 12345}) {
    for (const unsigned threads : {1u, 2u, 3u, 16u, 40u}) {
      // Odd offsets into both buffers, and guard bytes around the destination that stay as they
      // were.
      const std::vector<uint8_t> src = Pattern(n + 3);
      std::vector<uint8_t> dst(n + 2, 0xA5);
      ParallelCopy(dst.data() + 1, src.data() + 3, n, threads);
      EXPECT_TRUE(std::equal(src.begin() + 3, src.end(), dst.begin() + 1))
          << n << " bytes, " << threads;
      EXPECT_EQ(dst.front(), 0xA5) << n << " bytes, " << threads;
      EXPECT_EQ(dst.back(), 0xA5) << n << " bytes, " << threads;
    }
  }
}

TEST(ParallelCopyTest, UsesOneThreadPerMinimumShareUpToTheLimit) {
  EXPECT_EQ(ParallelCopyThreads(0, 8), 1u);
  EXPECT_EQ(ParallelCopyThreads(kParallelCopyMinBytes - 1, 8), 1u);
  EXPECT_EQ(ParallelCopyThreads(3 * kParallelCopyMinBytes, 8), 3u);
  EXPECT_EQ(ParallelCopyThreads(100 * kParallelCopyMinBytes, 8), 8u);
  EXPECT_EQ(ParallelCopyThreads(100 * kParallelCopyMinBytes, 64), 16u);  // never more than 16
  EXPECT_GE(ParallelCopyThreads(100 * kParallelCopyMinBytes), 1u);
  EXPECT_LE(ParallelCopyThreads(100 * kParallelCopyMinBytes), 16u);
}

}  // namespace
}  // namespace millipede
