// PrefixIndex: the longest allowed reuse of a prompt (block multiples, partial tails, the
// prompt - 1 cap, listed reuse lengths, keys), ties to the most recently used entry, removal
// beside entries sharing blocks, holders, pins, least-recently-used order, costs, PrefixKey, and
// a million-token entry.
#include "coordinator/prefix_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string_view>

namespace millipede {
namespace {

constexpr uint64_t kKey = 77;

PrefixIndex Make(int64_t block_tokens) {
  StatusOr<PrefixIndex> index = PrefixIndex::Create(block_tokens);
  EXPECT_TRUE(index.ok()) << index.status().ToString();
  return std::move(index).value();
}

// Tokens start, start + 1, ..., start + n - 1.
std::vector<int32_t> Iota(int64_t n, int32_t start = 100) {
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) tokens[i] = start + static_cast<int32_t>(i);
  return tokens;
}

// The first n of `tokens`, then `tail`.
std::vector<int32_t> Prefix(const std::vector<int32_t>& tokens, int64_t n,
                            std::vector<int32_t> tail = {}) {
  std::vector<int32_t> out(tokens.begin(), tokens.begin() + n);
  out.insert(out.end(), tail.begin(), tail.end());
  return out;
}

PrefixEntry Entry(uint64_t id, std::vector<int32_t> tokens, int64_t cost = 1,
                  uint64_t key = kKey) {
  PrefixEntry e;
  e.id = id;
  e.key = key;
  e.tokens = std::move(tokens);
  e.cost_per_rank = cost;
  return e;
}

PrefixEntry Listed(uint64_t id, std::vector<int32_t> tokens, std::vector<int64_t> lengths) {
  PrefixEntry e = Entry(id, std::move(tokens));
  e.every_length = false;
  e.lengths = std::move(lengths);
  return e;
}

// The reused tokens, expecting `entry` when they are not 0.
int64_t Reuse(PrefixIndex& index, const std::vector<int32_t>& prompt, uint64_t entry = 0,
              uint64_t key = kKey) {
  const PrefixHit hit = index.Lookup(key, prompt);
  if (hit.tokens > 0 && entry != 0) {
    EXPECT_EQ(hit.entry, entry);
  }
  return hit.tokens;
}

TEST(PrefixIndexTest, RefusesBadBlockSizesAndBadEntries) {
  EXPECT_EQ(PrefixIndex::Create(0).status().code(), StatusCode::kInvalidArgument);
  PrefixIndex index = Make(4);
  ASSERT_TRUE(index.Insert(Entry(1, Iota(8))).ok());
  EXPECT_EQ(index.Insert(Entry(0, Iota(8))).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(index.Insert(Entry(1, Iota(8))).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(index.Insert(Entry(2, {})).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(index.Insert(Entry(2, Iota(8), -1)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(index.Insert(Listed(2, Iota(8), {4, 4})).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(index.Insert(Listed(2, Iota(8), {6, 5})).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(index.Insert(Listed(2, Iota(8), {0, 4})).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(index.Insert(Listed(2, Iota(8), {4, 9})).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(index.size(), 1);
  EXPECT_FALSE(index.Contains(2));
  ASSERT_TRUE(index.Insert(Listed(2, Iota(8), {4, 8})).ok());
  ASSERT_NE(index.Find(2), nullptr);
  EXPECT_EQ(index.Find(2)->lengths, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(index.Find(3), nullptr);
}

TEST(PrefixIndexTest, MissesOnAnEmptyIndexAndBelowOneBlock) {
  PrefixIndex index = Make(4);
  const std::vector<int32_t> e = Iota(12);
  EXPECT_EQ(Reuse(index, e), 0);
  ASSERT_TRUE(index.Insert(Entry(1, e)).ok());
  EXPECT_EQ(Reuse(index, Prefix(e, 3, {-1, -2, -3})), 0);  // 3 tokens match: under a block
  EXPECT_EQ(Reuse(index, Prefix(e, 4)), 0);                // the cap leaves 3
  EXPECT_EQ(Reuse(index, Prefix(e, 4, {-1})), 4);
  EXPECT_EQ(Reuse(index, Iota(12, 5000)), 0);
}

TEST(PrefixIndexTest, EveryLengthHitsAtBlockMultiplesAndInsideBlocks) {
  PrefixIndex index = Make(4);
  const std::vector<int32_t> e = Iota(11);  // two whole blocks and a tail of 3
  ASSERT_TRUE(index.Insert(Entry(1, e)).ok());
  EXPECT_EQ(Reuse(index, Prefix(e, 8, {-1, -2})), 8);
  EXPECT_EQ(Reuse(index, Prefix(e, 4, {-1, -2, -3, -4, -5})), 4);
  EXPECT_EQ(Reuse(index, Prefix(e, 6, {-1, -2, -3})), 6);
  EXPECT_EQ(Reuse(index, Prefix(e, 10, {-1, -2})), 10);
  EXPECT_EQ(Reuse(index, Prefix(e, 11, {-1, -2, -3, -4, -5, -6})), 11);
}

TEST(PrefixIndexTest, ReusesAtMostAllButThePromptsLastToken) {
  PrefixIndex index = Make(4);
  const std::vector<int32_t> e = Iota(11);
  ASSERT_TRUE(index.Insert(Entry(1, e)).ok());
  EXPECT_EQ(Reuse(index, e), 10);
  EXPECT_EQ(Reuse(index, Prefix(e, 9)), 8);
  EXPECT_EQ(Reuse(index, Prefix(e, 8)), 7);
}

TEST(PrefixIndexTest, ListedLengthsOnlyTheLargestNotPastTheMatch) {
  PrefixIndex index = Make(4);
  const std::vector<int32_t> e = Iota(20);
  ASSERT_TRUE(index.Insert(Listed(1, e, {2, 6, 10, 17, 20})).ok());
  EXPECT_EQ(Reuse(index, Prefix(e, 20, {-1})), 20);
  EXPECT_EQ(Reuse(index, e), 17);  // the cap leaves 19
  EXPECT_EQ(Reuse(index, Prefix(e, 15, {-1})), 10);
  EXPECT_EQ(Reuse(index, Prefix(e, 10, {-1})), 10);
  EXPECT_EQ(Reuse(index, Prefix(e, 9, {-1})), 6);
  EXPECT_EQ(Reuse(index, Prefix(e, 5, {-1, -2})), 0);  // only 2 fits, under a block
  PrefixIndex empty_list = Make(4);
  ASSERT_TRUE(empty_list.Insert(Listed(1, e, {})).ok());
  EXPECT_EQ(Reuse(empty_list, Prefix(e, 20, {-1})), 0);
}

TEST(PrefixIndexTest, ReuseLengthsDecideNotTheDeepestMatch) {
  PrefixIndex index = Make(4);
  ASSERT_TRUE(index.Insert(Entry(1, Iota(10))).ok());
  ASSERT_TRUE(index.Insert(Listed(2, Iota(16), {4, 16})).ok());
  const std::vector<int32_t> prompt = Prefix(Iota(16), 14, {-1});
  EXPECT_EQ(Reuse(index, prompt, 1), 10);
  EXPECT_EQ(Reuse(index, Prefix(Iota(16), 16, {-1}), 2), 16);
}

TEST(PrefixIndexTest, ADifferentKeyNeverMatches) {
  PrefixIndex index = Make(4);
  const std::vector<int32_t> e = Iota(12);
  ASSERT_TRUE(index.Insert(Entry(1, e)).ok());
  EXPECT_EQ(Reuse(index, Prefix(e, 12, {-1}), 0, kKey + 1), 0);
  ASSERT_TRUE(index.Insert(Entry(2, Prefix(e, 8), 1, kKey + 1)).ok());
  EXPECT_EQ(Reuse(index, Prefix(e, 12, {-1}), 2, kKey + 1), 8);
  EXPECT_EQ(Reuse(index, Prefix(e, 12, {-1}), 1, kKey), 12);
}

TEST(PrefixIndexTest, TheLongerMatchWinsAndTiesGoToTheMostRecentlyUsed) {
  PrefixIndex index = Make(4);
  const std::vector<int32_t> shared = Iota(8);
  ASSERT_TRUE(index.Insert(Entry(1, Prefix(shared, 8, {500, 501, 502, 503}))).ok());
  ASSERT_TRUE(index.Insert(Entry(2, Iota(16))).ok());
  const std::vector<int32_t> both = Prefix(shared, 8, {-1, -2});
  EXPECT_EQ(Reuse(index, both, 2), 8);  // a tie: 2 came last
  EXPECT_EQ(Reuse(index, Prefix(shared, 8, {500, 501, -1}), 1), 10);
  EXPECT_EQ(Reuse(index, both, 1), 8);  // 1's hit made it the most recent
  EXPECT_EQ(Reuse(index, Prefix(Iota(16), 16, {-1}), 2), 16);
  EXPECT_EQ(Reuse(index, both, 2), 8);
  ASSERT_TRUE(index.Insert(Entry(3, Iota(16))).ok());  // the same tokens as 2
  EXPECT_EQ(Reuse(index, Prefix(Iota(16), 16, {-1}), 3), 16);
}

TEST(PrefixIndexTest, APromptDivergingInsideABlockAfterAMatchingChain) {
  PrefixIndex index = Make(4);
  const std::vector<int32_t> e = Iota(16);
  ASSERT_TRUE(index.Insert(Entry(1, e)).ok());
  // Blocks 0 and 1 are in the chain; the prompt's block 2 differs from the entry's at 9 or 10.
  std::vector<int32_t> prompt = e;
  prompt[9] = -1;
  EXPECT_EQ(Reuse(index, prompt), 9);
  prompt = e;
  prompt[10] = -1;
  EXPECT_EQ(Reuse(index, prompt), 10);
  prompt = e;
  prompt[4] = -1;
  EXPECT_EQ(Reuse(index, prompt), 4);
  prompt = e;
  prompt[15] = -1;
  EXPECT_EQ(Reuse(index, prompt), 15);
}

TEST(PrefixIndexTest, RemoveKeepsTheBlocksOtherEntriesShare) {
  PrefixIndex index = Make(4);
  const std::vector<int32_t> a = Iota(16);
  const std::vector<int32_t> b = Prefix(a, 8, {900, 901, 902, 903, 904, 905, 906, 907});
  ASSERT_TRUE(index.Insert(Entry(1, a)).ok());
  ASSERT_TRUE(index.Insert(Entry(2, b)).ok());
  EXPECT_EQ(index.Remove(3).code(), StatusCode::kNotFound);
  ASSERT_TRUE(index.Remove(2).ok());
  EXPECT_EQ(Reuse(index, Prefix(a, 16, {-1}), 1), 16);
  EXPECT_EQ(Reuse(index, Prefix(b, 16, {-1}), 1), 8);
  ASSERT_TRUE(index.Insert(Entry(2, b)).ok());
  ASSERT_TRUE(index.Remove(1).ok());
  EXPECT_FALSE(index.Contains(1));
  EXPECT_EQ(Reuse(index, Prefix(a, 16, {-1}), 2), 8);
  EXPECT_EQ(Reuse(index, Prefix(b, 16, {-1}), 2), 16);
  ASSERT_TRUE(index.Remove(2).ok());
  EXPECT_EQ(Reuse(index, Prefix(b, 16, {-1})), 0);
  EXPECT_EQ(index.size(), 0);
  ASSERT_TRUE(index.Insert(Entry(1, a)).ok());
  EXPECT_EQ(Reuse(index, Prefix(a, 16, {-1}), 1), 16);
}

TEST(PrefixIndexTest, EvictionOrderIsLeastRecentlyUsedWithoutPinnedOrHeld) {
  PrefixIndex index = Make(4);
  for (uint64_t id : {1, 2, 3})
    ASSERT_TRUE(index.Insert(Entry(id, Iota(8, 1000 * static_cast<int32_t>(id)))).ok());
  EXPECT_EQ(index.EvictionOrder(), (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(Reuse(index, Prefix(Iota(8, 1000), 8, {-1}), 1), 8);
  EXPECT_EQ(Reuse(index, Iota(8, 99999)), 0);  // a miss uses nothing
  EXPECT_EQ(index.EvictionOrder(), (std::vector<uint64_t>{2, 3, 1}));
  ASSERT_TRUE(index.SetPinned(2, true).ok());
  EXPECT_EQ(index.EvictionOrder(), (std::vector<uint64_t>{3, 1}));
  ASSERT_TRUE(index.Acquire(3).ok());
  ASSERT_TRUE(index.Acquire(3).ok());
  EXPECT_EQ(index.EvictionOrder(), (std::vector<uint64_t>{1}));
  EXPECT_EQ(index.Remove(3).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(index.Release(3).ok());
  EXPECT_EQ(index.EvictionOrder(), (std::vector<uint64_t>{1}));
  ASSERT_TRUE(index.Release(3).ok());
  EXPECT_EQ(index.Release(3).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(index.EvictionOrder(), (std::vector<uint64_t>{3, 1}));
  ASSERT_TRUE(index.SetPinned(2, false).ok());
  EXPECT_EQ(index.EvictionOrder(), (std::vector<uint64_t>{2, 3, 1}));
  ASSERT_TRUE(index.Remove(3).ok());
  EXPECT_EQ(index.EvictionOrder(), (std::vector<uint64_t>{2, 1}));
  EXPECT_EQ(index.Acquire(9).code(), StatusCode::kNotFound);
  EXPECT_EQ(index.Release(9).code(), StatusCode::kNotFound);
  EXPECT_EQ(index.SetPinned(9, true).code(), StatusCode::kNotFound);
}

TEST(PrefixIndexTest, CostsSumEveryEntryAndTheEvictableOnes) {
  PrefixIndex index = Make(4);
  EXPECT_EQ(index.cost_per_rank(), 0);
  for (uint64_t id : {1, 2, 3})
    ASSERT_TRUE(index.Insert(Entry(id, Iota(8, 1000 * static_cast<int32_t>(id)),
                                   10 * static_cast<int64_t>(id))).ok());
  EXPECT_EQ(index.cost_per_rank(), 60);
  EXPECT_EQ(index.evictable_cost_per_rank(), 60);
  ASSERT_TRUE(index.SetPinned(1, true).ok());
  EXPECT_EQ(index.evictable_cost_per_rank(), 50);
  ASSERT_TRUE(index.Acquire(2).ok());
  EXPECT_EQ(index.evictable_cost_per_rank(), 30);
  ASSERT_TRUE(index.Remove(3).ok());
  EXPECT_EQ(index.cost_per_rank(), 30);
  EXPECT_EQ(index.evictable_cost_per_rank(), 0);
}

TEST(PrefixIndexTest, ListsMostRecentlyUsedFirst) {
  PrefixIndex index = Make(4);
  ASSERT_TRUE(index.Insert(Entry(1, Iota(8, 1000), 5)).ok());
  ASSERT_TRUE(index.Insert(Entry(2, Iota(12, 2000), 7)).ok());
  ASSERT_TRUE(index.Insert(Entry(3, Iota(9, 3000), 9)).ok());
  for (int i = 0; i < 2; ++i) EXPECT_EQ(Reuse(index, Prefix(Iota(8, 1000), 8, {-1}), 1), 8);
  ASSERT_TRUE(index.SetPinned(3, true).ok());
  ASSERT_TRUE(index.Acquire(2).ok());
  const std::vector<PrefixEntryInfo> list = index.List();
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0].id, 1u);
  EXPECT_EQ(list[1].id, 3u);
  EXPECT_EQ(list[2].id, 2u);
  EXPECT_GT(list[0].last_use, list[1].last_use);
  EXPECT_GT(list[1].last_use, list[2].last_use);
  EXPECT_EQ(list[0].hits, 2);
  EXPECT_EQ(list[0].tokens, 8);
  EXPECT_EQ(list[0].cost_per_rank, 5);
  EXPECT_TRUE(list[1].pinned);
  EXPECT_FALSE(list[2].pinned);
  EXPECT_EQ(list[2].holders, 1);
  EXPECT_EQ(list[2].hits, 0);
  EXPECT_EQ(list[2].tokens, 12);
}

TEST(PrefixIndexTest, PrefixKeySeparatesPartsAndIsStable) {
  const std::string_view ab_c[] = {"ab", "c"};
  const std::string_view a_bc[] = {"a", "bc"};
  const std::string_view a[] = {"a"};
  const std::string_view a_empty[] = {"a", ""};
  EXPECT_NE(PrefixKey(ab_c), PrefixKey(a_bc));
  EXPECT_EQ(PrefixKey(ab_c), PrefixKey(ab_c));
  EXPECT_NE(PrefixKey(a), PrefixKey(a_empty));
  // FNV-1a 64 over the length as 8 little-endian bytes, then the bytes: fixed values, so keys
  // mean the same in every process and release.
  EXPECT_EQ(PrefixKey({}), 0xcbf29ce484222325ULL);
  EXPECT_EQ(PrefixKey(a), 0x529a4ddc8ff56bbfULL);
}

// What Lookup must return, by comparing the prompt with every entry (before the lookup).
PrefixHit BruteForce(const PrefixIndex& index, uint64_t key, const std::vector<int32_t>& prompt) {
  PrefixHit best;
  uint64_t best_use = 0;
  for (const PrefixEntryInfo& info : index.List()) {
    const PrefixEntry& e = *index.Find(info.id);
    if (e.key != key) continue;
    int64_t match = 0;
    while (match < info.tokens && match < static_cast<int64_t>(prompt.size()) &&
           e.tokens[match] == prompt[match])
      ++match;
    int64_t reuse = 0;
    for (int64_t l = 1; l <= std::min(match, static_cast<int64_t>(prompt.size()) - 1); ++l)
      if (e.every_length || std::count(e.lengths.begin(), e.lengths.end(), l) > 0) reuse = l;
    if (reuse < index.block_tokens()) continue;
    if (reuse > best.tokens || (reuse == best.tokens && info.last_use > best_use)) {
      best = {info.id, reuse};
      best_use = info.last_use;
    }
  }
  return best;
}

TEST(PrefixIndexTest, AgreesWithComparingEveryEntryOnRandomPrompts) {
  std::mt19937 random(11);
  auto below = [&](int64_t n) { return static_cast<int64_t>(random() % n); };
  PrefixIndex index = Make(3);
  std::vector<std::vector<int32_t>> made;  // every sequence inserted, to share prefixes of
  int64_t hits = 0;
  // A sequence sharing a random prefix of an earlier one, then random tokens of {0, 1}.
  auto sequence = [&]() {
    std::vector<int32_t> s;
    if (!made.empty()) {
      const std::vector<int32_t>& base = made[below(static_cast<int64_t>(made.size()))];
      s = Prefix(base, below(static_cast<int64_t>(base.size()) + 1));
    }
    for (int64_t n = below(20); n >= 0; --n) s.push_back(static_cast<int32_t>(below(2)));
    return s;
  };
  for (uint64_t id = 1; id <= 300; ++id) {
    PrefixEntry e = Entry(id, sequence(), 1, below(4) == 0 ? kKey + 1 : kKey);
    if (below(3) == 0) {
      e.every_length = false;
      for (int64_t l = 1; l <= static_cast<int64_t>(e.tokens.size()); ++l)
        if (below(4) == 0) e.lengths.push_back(l);
    }
    made.push_back(e.tokens);
    ASSERT_TRUE(index.Insert(std::move(e)).ok());
    if (below(3) == 0) {  // removes about one entry in three
      const std::vector<PrefixEntryInfo> list = index.List();
      ASSERT_TRUE(index.Remove(list[below(static_cast<int64_t>(list.size()))].id).ok());
    }
    for (int q = 0; q < 5; ++q) {
      const uint64_t key = below(4) == 0 ? kKey + 1 : kKey;
      const std::vector<int32_t> prompt = sequence();
      const PrefixHit want = BruteForce(index, key, prompt);
      const PrefixHit got = index.Lookup(key, prompt);
      ASSERT_EQ(got.tokens, want.tokens) << "entry " << id << " query " << q;
      if (want.tokens > 0) {
        ASSERT_EQ(got.entry, want.entry) << "entry " << id << " query " << q;
      }
      hits += got.tokens > 0 ? 1 : 0;
    }
  }
  EXPECT_GT(hits, 750);  // most of the 1500 prompts share a prefix with some entry
}

TEST(PrefixIndexTest, AMillionTokenEntry) {
  constexpr int64_t kTokens = int64_t{1} << 20;
  PrefixIndex index = Make(16);
  std::mt19937 random(5);
  std::vector<int32_t> e(kTokens);
  for (int32_t& t : e) t = static_cast<int32_t>(random() % 128000);
  ASSERT_TRUE(index.Insert(Entry(1, e)).ok());
  ASSERT_TRUE(index.Insert(Entry(2, Prefix(e, kTokens / 2, Iota(kTokens / 2, -7)))).ok());
  EXPECT_EQ(Reuse(index, Prefix(e, kTokens, {-1}), 1), kTokens);
  EXPECT_EQ(Reuse(index, e, 1), kTokens - 1);
  std::vector<int32_t> prompt = e;
  prompt[700001] = -1;
  EXPECT_EQ(Reuse(index, prompt, 1), 700001);
  prompt = Prefix(e, kTokens / 2 + 5, {-1});
  EXPECT_EQ(Reuse(index, prompt, 1), kTokens / 2 + 5);
  EXPECT_EQ(Reuse(index, Prefix(e, kTokens / 2 - 3, {-1}), 1), kTokens / 2 - 3);
  ASSERT_TRUE(index.Remove(1).ok());
  EXPECT_EQ(Reuse(index, Prefix(e, kTokens, {-1}), 2), kTokens / 2);
}

}  // namespace
}  // namespace millipede
