// The prefix cache's shared KV blocks as both sides count them: the unit fills whole pages for
// any number of heads, a store has at most kKvShareChunks chunks, and only whole chunks before
// the prefix are shared.
#include "common/kv_share.h"

#include <gtest/gtest.h>

namespace millipede {
namespace {

TEST(KvShareTest, TheUnitFillsWholePagesForAnyNumberOfHeads) {
  EXPECT_EQ(KvShareUnitRows(4096, 64), 64);        // head_dim 16 in f32
  EXPECT_EQ(KvShareUnitRows(2 << 20, 256), 8192);  // head_dim 128 in bf16, 2 MiB pages
  EXPECT_EQ(KvShareUnitRows(4096, 96), 128);       // 128 x 96 = 3 pages
  EXPECT_EQ(KvShareUnitRows(0, 256), 0);
  EXPECT_EQ(KvShareUnitRows(4096, 0), 0);
}

TEST(KvShareTest, AStoreHasAtMostSixteenChunks) {
  EXPECT_EQ(KvShareChunkRows(100, 64), 64);
  EXPECT_EQ(KvShareChunkRows(1024, 64), 64);
  EXPECT_EQ(KvShareChunkRows(1025, 64), 128);
  EXPECT_EQ(KvShareChunkRows(1 << 20, 8192), 65536);
  EXPECT_EQ(KvShareChunkRows(1 << 20, 0), 0);
}

TEST(KvShareTest, OnlyWholeChunksBeforeThePrefixAreShared) {
  EXPECT_EQ(KvSharedRows(96, 153, 64), 64);
  EXPECT_EQ(KvSharedRows(63, 153, 64), 0);
  EXPECT_EQ(KvSharedRows(2048, 2048, 64), 2048);  // chunks of 128
  EXPECT_EQ(KvSharedRows(2047, 2048, 64), 1920);
  EXPECT_EQ(KvSharedRows(500, 2048, 0), 0);
}

}  // namespace
}  // namespace millipede
