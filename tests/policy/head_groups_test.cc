// What a sequence's KV stores keep under a policy (policy/head_groups.h): which layers
// split their KV heads into groups, when a sequence is long enough to split, and the rows every
// store holds, checked by hand.
#include "policy/head_groups.h"

#include <gtest/gtest.h>

#include <string>

namespace millipede {
namespace {

// 2 layers x 4 KV heads.
AttentionPolicy Parse(const std::string& json) {
  auto p = ParseAttentionPolicy(json, 2, 4, "policy");
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? *p : DensePolicy(2, 4);
}

// Layer 0 mixes full heads 0, 2 and streaming heads 1, 3; layer 1 is dense.
AttentionPolicy Duo(int64_t a_shape_window, const std::string& layer0_prefill,
                    int64_t dense_below = 0) {
  return Parse(R"({"version": 1, "dense_below_tokens": )" + std::to_string(dense_below) + R"(,
      "layers": [{"layer": 0, "prefill": )" + layer0_prefill + R"(,
                  "decode": ["full", "streaming-head", "full", "streaming-head"]}],
      "a_shape": {"sink_tokens": 4, "window_tokens": )" + std::to_string(a_shape_window) + R"(},
      "streaming_head": {"sink_tokens": 4, "window_tokens": 16}})");
}
const char kDuoPrefill[] = R"(["dense", "a-shape", "dense", "a-shape"])";

TEST(HeadGroupsTest, MixedLayersSplitWhenTheirStreamingHeadsNeedOnlyTheirWindow) {
  const AttentionPolicy duo = Duo(16, kDuoPrefill);
  const KvHeadGroups g = LayerHeadGroups(duo, 0);
  EXPECT_EQ(g.full, (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(g.streaming, (std::vector<int32_t>{1, 3}));
  EXPECT_TRUE(LayerHeadGroups(duo, 1).empty());  // dense
  // A streaming head whose a-shape reaches beyond the window, or that prefills dense, needs rows
  // its store would drop; a sparse head's index reads any row.
  EXPECT_TRUE(LayerHeadGroups(Duo(17, kDuoPrefill), 0).empty());
  EXPECT_TRUE(LayerHeadGroups(Duo(16, R"(["dense", "dense", "dense", "a-shape"])"), 0).empty());
  EXPECT_TRUE(
      LayerHeadGroups(Duo(16, R"(["vertical-slash", "a-shape", "dense", "a-shape"])"), 0).empty());
  // Every head streaming: one constant-size store, no groups.
  EXPECT_TRUE(LayerHeadGroups(Parse(R"({"version": 1, "default": {"decode": "streaming-head"}})"),
                              0)
                  .empty());
}

TEST(HeadGroupsTest, ASequenceSplitsWhenTheStreamingStoreIsUnderHalfItsCapacity) {
  const AttentionPolicy duo = Duo(16, kDuoPrefill);
  EXPECT_EQ(StreamingStoreRows(4, 16, 0, 100), 4 + 16 + 16 + 100);
  EXPECT_EQ(StreamingStoreRows(4, 16, 1000, 100), 1000 + 16 + 100);
  EXPECT_FALSE(SplitsKvHeads(duo, 2 * 136, 100));
  EXPECT_TRUE(SplitsKvHeads(duo, 2 * 136 + 1, 100));
  EXPECT_FALSE(SplitsKvHeads(duo, 1000, 1000));  // one step covers the sequence
  EXPECT_FALSE(SplitsKvHeads(Duo(16, kDuoPrefill, 500), 1000, 100));  // 2 x 616 > 1000
  EXPECT_TRUE(SplitsKvHeads(Duo(16, kDuoPrefill, 500), 1300, 100));
  EXPECT_FALSE(SplitsKvHeads(DensePolicy(2, 4), 1 << 20, 100));
}

TEST(HeadGroupsTest, KvHeadRowsCountWhatTheStoresHold) {
  const int64_t capacity = 10000, step = 100;
  EXPECT_EQ(KvHeadRows(DensePolicy(2, 4), 4, capacity, step), 2 * 4 * capacity);
  // Layer 0: 2 heads x every row + 2 x (4 + 16 + 16 + 100); layer 1: 4 x every row.
  const AttentionPolicy duo = Duo(16, kDuoPrefill);
  EXPECT_EQ(KvHeadRows(duo, 4, capacity, step), 2 * capacity + 2 * 136 + 4 * capacity);
  EXPECT_EQ(KvHeadRows(duo, 4, capacity, step, false), 2 * 4 * capacity);
  EXPECT_EQ(KvHeadRows(duo, 4, 200, step), 2 * 4 * 200);  // too short to split
  // An all-streaming layer keeps its constant-size store whatever the length.
  const AttentionPolicy streaming = Parse(R"({"version": 1,
      "layers": [{"layer": 1, "decode": "streaming-head"}],
      "streaming_head": {"sink_tokens": 4, "window_tokens": 16}})");
  EXPECT_EQ(KvHeadRows(streaming, 4, capacity, step), 4 * capacity + 4 * 136);
}

}  // namespace
}  // namespace millipede
