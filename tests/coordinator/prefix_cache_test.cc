// The prefix cache's policy on the coordinator: the reuse rule of each kind of attention
// policy, which positions each rank holds of a job's KV, and what an ended job's entry offers.
#include "coordinator/prefix_cache.h"

#include "coordinator/disk_entries.h"

#include <gtest/gtest.h>

namespace millipede {
namespace {

AttentionPolicy Policy(PrefillPattern prefill, DecodeRole decode) {
  AttentionPolicy p = DensePolicy(2, 2);
  for (LayerPolicy& layer : p.layers) {
    for (HeadPrefillPolicy& head : layer.prefill) head.pattern = prefill;
    for (DecodeRole& role : layer.decode) role = decode;
  }
  return p;
}

TEST(PrefixCacheTest, ReuseRuleFollowsThePolicy) {
  EXPECT_EQ(ReuseOf(std::nullopt), PrefixReuse::kAnyLength);
  EXPECT_EQ(ReuseOf(DensePolicy(2, 2)), PrefixReuse::kAnyLength);
  EXPECT_EQ(ReuseOf(Policy(PrefillPattern::kDense, DecodeRole::kStaticEviction)),
            PrefixReuse::kPromptAnyLength);
  EXPECT_EQ(ReuseOf(Policy(PrefillPattern::kVerticalSlash, DecodeRole::kFull)),
            PrefixReuse::kChunkEnds);
  EXPECT_EQ(ReuseOf(Policy(PrefillPattern::kAShape, DecodeRole::kFull)), PrefixReuse::kChunkEnds);
  // A window store wins over everything: only its own length.
  AttentionPolicy duo = DensePolicy(2, 2);
  duo.layers[1].decode[0] = DecodeRole::kStreamingHead;
  EXPECT_EQ(ReuseOf(duo), PrefixReuse::kOwnLength);
}

TEST(PrefixCacheTest, RankPositionsFollowTheShardPlan) {
  RankPositions p(2);
  p.AddChunk(0, 8);   // zig-zag: rank 0 [0,2) [6,8), rank 1 [2,6)
  p.AddChunk(8, 4);   // rank 0 [8,9) [11,12), rank 1 [9,11)
  p.AddDecode(12);    // rank 0
  p.AddDecode(13);    // rank 1
  EXPECT_EQ(p.total(), 14);
  EXPECT_EQ(p.MaxRows(), 7);
  const RankPositions before = p.Before(7);  // rank 0 [0,2) [6,7): 3; rank 1 [2,6): 4
  EXPECT_EQ(before.total(), 7);
  EXPECT_EQ(before.MaxRows(), 4);
  EXPECT_EQ(RankPositions(3).MaxRows(), 0);
}

std::vector<int32_t> Tokens(int n, int32_t base) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = base + i % 50;
  return t;
}

EndedKv Ended(uint64_t job, PrefixReuse reuse, const std::vector<int32_t>& prompt,
              const std::vector<int32_t>& generated, const std::vector<int64_t>& chunk_ends) {
  RankPositions positions(1);
  positions.AddChunk(0, static_cast<int64_t>(prompt.size()));
  for (size_t i = 0; i < generated.size(); ++i)
    positions.AddDecode(static_cast<int64_t>(prompt.size() + i));
  return EndedKv{.job = job, .key = 5, .reuse = reuse, .prompt = prompt,
                 .generated = generated, .chunk_ends = chunk_ends, .positions = positions,
                 .cost_per_rank = 100, .capacity_per_rank = 120};
}

TEST(PrefixCacheTest, EntriesOfferWhatTheirPolicyAllows) {
  auto cache = PrefixCache::Create(16, 1, "model");
  ASSERT_TRUE(cache.ok());
  const std::vector<int32_t> prompt = Tokens(64, 100), generated = Tokens(5, 300);
  std::vector<int32_t> follow = prompt;
  follow.insert(follow.end(), generated.begin(), generated.end());
  follow.push_back(7);
  // Exact attention: prompt and generated tokens, any length.
  ASSERT_TRUE(cache->Insert(Ended(1, PrefixReuse::kAnyLength, prompt, generated, {32, 64})));
  auto hit = cache->Lookup(5, follow);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->entry, 1u);
  EXPECT_EQ(hit->tokens, 69);
  EXPECT_TRUE(hit->exclusive);
  EXPECT_EQ(hit->capacity, 120);
  EXPECT_EQ(hit->positions.total(), 69);
  EXPECT_TRUE(hit->reuse_lengths.empty());              // every length is
  EXPECT_FALSE(cache->Lookup(6, follow).has_value());  // another key
  ASSERT_TRUE(cache->Remove(1).ok());
  // Sparse prefill: the chunk ends only; a prompt diverging at 50 reuses 32.
  ASSERT_TRUE(cache->Insert(Ended(2, PrefixReuse::kChunkEnds, prompt, generated, {32, 64})));
  std::vector<int32_t> diverging = prompt;
  diverging[50] = 9999;
  hit = cache->Lookup(5, diverging);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->tokens, 32);
  EXPECT_EQ(hit->reuse_lengths, std::vector<int64_t>{32});
  EXPECT_EQ(cache->Lookup(5, follow)->tokens, 64);  // not into the generated tokens
  // A job starting there inherits the lengths up to its start (job_table.cc).
  EXPECT_EQ(cache->Lookup(5, follow)->reuse_lengths, (std::vector<int64_t>{32, 64}));
  // Held entries are not exclusive; pinned ones neither, and survive Evict.
  ASSERT_TRUE(cache->Hold(2).ok());
  EXPECT_FALSE(cache->Lookup(5, follow)->exclusive);
  EXPECT_TRUE(cache->Evict(-1).dropped_device.empty());
  cache->Release(2);
  ASSERT_TRUE(cache->Pin(2, true).ok());
  EXPECT_TRUE(cache->Evict(-1).dropped_device.empty());
  ASSERT_TRUE(cache->Pin(2, false).ok());
  EXPECT_EQ(cache->Evict(50).dropped_device, std::vector<uint64_t>{2});
  EXPECT_EQ(cache->stats().evictions, 1);
  EXPECT_EQ(cache->Pin(2, true).code(), StatusCode::kNotFound);
  // A window store: its own length only, generated tokens included.
  ASSERT_TRUE(cache->Insert(Ended(3, PrefixReuse::kOwnLength, prompt, generated, {64})));
  EXPECT_EQ(cache->Lookup(5, follow)->tokens, 69);
  EXPECT_FALSE(cache->Lookup(5, diverging).has_value());
  // Shorter than a block: nothing worth keeping.
  EXPECT_FALSE(cache->Insert(Ended(4, PrefixReuse::kAnyLength, Tokens(10, 1), {}, {10})));
  // Hits and misses are counted in prompt tokens.
  EXPECT_GT(cache->stats().hit_tokens, 0);
  EXPECT_GT(cache->stats().miss_tokens, 0);
}

// The host tier: entries evicted from KV memory move to host memory where they fit (the host
// tier dropping its own least recently used entries to make room), pinned and held entries
// move but are never dropped, and a hit there is a copy.
TEST(PrefixCacheTest, EvictionDemotesToTheHostTier) {
  auto cache = PrefixCache::Create(16, 1, "model");
  ASSERT_TRUE(cache.ok());
  // 64 prompt positions per entry at 10 bytes each: 640 bytes; room for two.
  cache->SetHostTier(1300, 10);
  for (uint64_t id = 1; id <= 4; ++id)
    ASSERT_TRUE(cache->Insert(Ended(id, PrefixReuse::kPromptAnyLength,
                                    Tokens(64, static_cast<int32_t>(100 * id)), {}, {64})));
  ASSERT_TRUE(cache->Pin(4, true).ok());
  // One entry's cost frees the least recently used one, to the host.
  PrefixEviction e = cache->Evict(100);
  EXPECT_EQ(e.demoted, std::vector<uint64_t>{1});
  EXPECT_TRUE(e.dropped_device.empty() && e.dropped_host.empty());
  EXPECT_EQ(cache->tier_of(1), CacheTier::kHost);
  EXPECT_EQ(cache->stats().cost_per_rank, 300);
  EXPECT_EQ(cache->stats().host_bytes_per_rank, 640);
  // A hit in the host tier is a copy, never a take.
  std::vector<int32_t> follow = Tokens(64, 100);
  follow.push_back(1);
  auto hit = cache->Lookup(5, follow);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->entry, 1u);
  EXPECT_FALSE(hit->exclusive);
  EXPECT_EQ(cache->stats().host_hits, 1);
  // Everything, pinned 4 last: 2 moves down beside 1; 3 pushes out the least recently used host
  // entry (2: entry 1 was just used); the pinned 4 pushes out 3 (used before 1).
  e = cache->Evict(-1);
  EXPECT_EQ(e.demoted, (std::vector<uint64_t>{2, 3, 4}));
  EXPECT_EQ(e.dropped_host, (std::vector<uint64_t>{2, 3}));
  EXPECT_TRUE(e.dropped_device.empty());
  EXPECT_EQ(cache->stats().host_entries, 2);
  EXPECT_EQ(cache->stats().cost_per_rank, 0);
  EXPECT_EQ(cache->stats().demotions, 4);
  EXPECT_EQ(cache->stats().evictions, 2);
  // Pinned entries are never dropped: a new entry takes 1's place beside the pinned 4; once it
  // is pinned too, a third has no room and is dropped from KV memory instead.
  ASSERT_TRUE(cache->Insert(Ended(5, PrefixReuse::kPromptAnyLength, Tokens(64, 500), {}, {64})));
  e = cache->Evict(-1);
  EXPECT_EQ(e.demoted, std::vector<uint64_t>{5});
  EXPECT_EQ(e.dropped_host, std::vector<uint64_t>{1});
  ASSERT_TRUE(cache->Pin(5, true).ok());
  ASSERT_TRUE(cache->Insert(Ended(6, PrefixReuse::kPromptAnyLength, Tokens(64, 600), {}, {64})));
  e = cache->Evict(-1);
  EXPECT_TRUE(e.demoted.empty());
  EXPECT_EQ(e.dropped_device, std::vector<uint64_t>{6});
  EXPECT_EQ(cache->tier_of(4), CacheTier::kHost);
  EXPECT_EQ(cache->tier_of(5), CacheTier::kHost);
  // Removing a host entry frees its bytes.
  ASSERT_TRUE(cache->Pin(5, false).ok());
  ASSERT_TRUE(cache->Remove(5).ok());
  EXPECT_EQ(cache->stats().host_bytes_per_rank, 640);
}

// The disk tier below the host tier: an entry the host tier cannot take goes to disk, the host
// tier's victims move to disk rather than being dropped, and the disk tier drops its least
// recently used entries to make room.
// The shared blocks: a hit in backend memory says how many rows per rank a copy maps (whole
// chunks of the entry's capacity); an entry a job shares is neither demoted nor dropped until it
// lets go.
TEST(PrefixCacheTest, SharedBlocks) {
  auto cache = PrefixCache::Create(16, 1, "model");
  ASSERT_TRUE(cache.ok());
  cache->SetHostTier(100000, 10);
  std::vector<int32_t> follow = Tokens(64, 100);
  follow.push_back(1);
  ASSERT_TRUE(cache->Insert(Ended(1, PrefixReuse::kAnyLength, Tokens(64, 100), {}, {64})));
  EXPECT_EQ(cache->Lookup(5, follow)->shared_rows, 0);  // no unit: nothing is shared
  cache->SetShareUnit(16);  // a capacity of 120 rows: chunks of 16, so 64 rows share 4
  auto hit = cache->Lookup(5, follow);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->shared_rows, 64);
  ASSERT_TRUE(cache->Hold(1).ok());
  cache->Share(1);
  PrefixEviction e = cache->Evict(-1);
  EXPECT_TRUE(e.demoted.empty() && e.dropped_device.empty());
  EXPECT_EQ(cache->tier_of(1), CacheTier::kDevice);
  cache->Unshare(1);
  cache->Release(1);
  e = cache->Evict(-1);
  EXPECT_EQ(e.demoted, std::vector<uint64_t>{1});
  EXPECT_EQ(cache->Lookup(5, follow)->shared_rows, 0);  // in the host tier: a copy
}

TEST(PrefixCacheTest, EvictionSpillsToTheDiskTier) {
  auto cache = PrefixCache::Create(16, 1, "model");
  ASSERT_TRUE(cache.ok());
  cache->SetHostTier(700, 10);  // one entry of 64 positions (640 bytes)
  cache->SetDiskTier(1300);     // two
  for (uint64_t id = 1; id <= 4; ++id)
    ASSERT_TRUE(cache->Insert(Ended(id, PrefixReuse::kPromptAnyLength,
                                    Tokens(64, static_cast<int32_t>(100 * id)), {}, {64})));
  // 1 to the host; 2 pushes 1 to disk; 3 pushes 2 to disk; 4 pushes 3 down, which pushes 1 out.
  PrefixEviction e = cache->Evict(-1);
  EXPECT_EQ(e.demoted, (std::vector<uint64_t>{1, 2, 3, 4}));
  EXPECT_EQ(e.spilled, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(e.dropped_disk, std::vector<uint64_t>{1});
  EXPECT_TRUE(e.dropped_device.empty() && e.dropped_host.empty());
  EXPECT_EQ(cache->tier_of(4), CacheTier::kHost);
  EXPECT_EQ(cache->tier_of(3), CacheTier::kDisk);
  const PrefixCacheStats s = cache->stats();
  EXPECT_EQ(s.host_entries, 1);
  EXPECT_EQ(s.disk_entries, 2);
  EXPECT_EQ(s.disk_bytes_per_rank, 1280);
  EXPECT_EQ(s.spills, 3);
  // A hit on disk is a copy, counted as a disk hit.
  std::vector<int32_t> follow = Tokens(64, 200);
  follow.push_back(1);
  auto hit = cache->Lookup(5, follow);
  ASSERT_TRUE(hit.has_value());
  EXPECT_FALSE(hit->exclusive);
  EXPECT_EQ(cache->stats().disk_hits, 1);
  // With no host room at all, a device entry goes straight to disk.
  cache->SetHostTier(0, 10);
  ASSERT_TRUE(cache->Insert(Ended(5, PrefixReuse::kPromptAnyLength, Tokens(64, 500), {}, {64})));
  e = cache->Evict(-1);
  EXPECT_EQ(e.spilled, std::vector<uint64_t>{5});
  EXPECT_EQ(e.dropped_disk, std::vector<uint64_t>{3});  // 2 was just used
  EXPECT_EQ(cache->tier_of(5), CacheTier::kDisk);
}

control::CacheEntryFacts Reported(uint64_t id, const std::string& model_key,
                                  std::vector<int64_t> stored) {
  return control::CacheEntryFacts{.entry = id, .key = 5, .model_key = model_key,
                                  .tokens = Tokens(64, 700), .every_length = true,
                                  .lengths = {}, .length = 64, .stored = std::move(stored)};
}

// After a restart: an entry every rank reports is indexed on disk with each rank's positions;
// one a rank lacks or reports otherwise is dropped; another model's is left alone; more than
// the disk tier holds is trimmed.
TEST(PrefixCacheTest, DiskEntriesAreIndexedAgainAfterARestart) {
  auto cache = PrefixCache::Create(16, 2, "model");
  ASSERT_TRUE(cache.ok());
  cache->SetHostTier(0, 10);
  cache->SetDiskTier(1000);
  const std::vector<std::vector<control::CacheEntryFacts>> reports = {
      {Reported(7, "model", {0, 16, 48, 64}), Reported(8, "model", {0, 32}),
       Reported(9, "other", {0, 32}), Reported(10, "model", {0, 32})},
      {Reported(7, "model", {16, 48}), Reported(8, "model", {30, 64}),
       Reported(9, "other", {32, 64})}};
  const DiskReindex found = ReindexDiskEntries(reports, &*cache);
  EXPECT_EQ(found.adopted, 1);
  EXPECT_EQ(found.drop, (std::vector<uint64_t>{8, 10}));  // overlapping ranges; rank 1 lacks 10
  EXPECT_EQ(found.max_id, 10u);
  EXPECT_EQ(cache->tier_of(7), CacheTier::kDisk);
  EXPECT_FALSE(cache->index().Contains(9));
  std::vector<int32_t> follow = Tokens(64, 700);
  follow.push_back(3);
  auto hit = cache->Lookup(5, follow);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->entry, 7u);
  EXPECT_EQ(hit->tokens, 64);
  EXPECT_EQ(hit->positions.MaxRows(), 32);
  EXPECT_FALSE(hit->exclusive);
  // 32 rows x 10 bytes on the busiest rank: 320 bytes, which a disk tier of 300 cannot hold.
  EXPECT_EQ(cache->stats().disk_bytes_per_rank, 320);
  EXPECT_TRUE(cache->TrimDisk().empty());
  cache->SetDiskTier(300);
  EXPECT_EQ(cache->TrimDisk(), std::vector<uint64_t>{7});
  EXPECT_EQ(cache->stats().disk_entries, 0);
}

}  // namespace
}  // namespace millipede
