// The prefix cache's index on the coordinator: which cached sequences ("entries": a finished
// job's KV, kept by every worker rank, each rank its own share) hold the KV of which token
// prefixes, found through a hash chain over fixed-size token blocks (as vLLM's automatic prefix
// caching keys its blocks). Pure code: no MPI, no clock, no threads.
//
// Block i of a token list covers tokens [i x B, (i + 1) x B) (B = block_tokens); its chain hash
// is H(hash of block i - 1, the block's tokens), the chain seeded with the entry's key (what
// changes the KV besides the tokens: the model, the attention policy, the KV dtype), so equal
// hashes mean (up to a 64-bit collision, which Lookup rules out by comparing tokens) equal
// tokens from position 0 under equal keys.
//
// An entry may be reused at some lengths only: its KV of [0, L) equals what an uncached run
// computes only where L is one of the entry's reuse lengths (every length for exact attention;
// for sparse prefill the ends of the chunks it was prefilled in; for a store that keeps only a
// window the entry's own length). Lookup returns the longest such L.
//
// Eviction: entries are kept in least-recently-used order; pinned entries and entries a job
// holds (Acquire: a job waiting to start from it) are never evicted.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"

namespace millipede {

// A 64-bit key from the bytes of whatever changes the KV (the model's identity, the policy's
// canonical JSON, the KV dtype), stable across processes and runs (no std::hash): FNV-1a or
// similar over the parts, each length-prefixed so that ("ab","c") != ("a","bc").
uint64_t PrefixKey(std::span<const std::string_view> parts);

struct PrefixEntry {
  uint64_t id = 0;   // the id the workers keep the KV under (the job that made it)
  uint64_t key = 0;  // PrefixKey of what changes the KV
  // Tokens [0, size) whose KV the entry holds (prompt, then the generated tokens that were
  // run through the model).
  std::vector<int32_t> tokens;
  // Reuse lengths: every length in [1, tokens.size()] when every_length, else exactly the
  // listed ones (ascending, each in [1, tokens.size()]).
  bool every_length = true;
  std::vector<int64_t> lengths;
  // KV positions the entry holds on the busiest rank (what it counts in the KV budget).
  int64_t cost_per_rank = 0;
};

struct PrefixHit {
  uint64_t entry = 0;  // meaningful when tokens > 0
  int64_t tokens = 0;  // reused prompt tokens; 0: a miss
};

// One entry as List reports it.
struct PrefixEntryInfo {
  uint64_t id = 0;
  int64_t tokens = 0;
  int64_t cost_per_rank = 0;
  bool pinned = false;
  int64_t holders = 0;      // Acquire count
  uint64_t last_use = 0;    // the Touch counter value of its last use
  int64_t hits = 0;         // Lookups that returned it
};

class PrefixIndex {
 public:
  // block_tokens >= 1 (InvalidArgument otherwise).
  static StatusOr<PrefixIndex> Create(int64_t block_tokens);

  int64_t block_tokens() const;
  // Inserts `entry` (InvalidArgument: id 0, an id already present, empty tokens, lengths not
  // ascending or outside [1, size], a negative cost). Its blocks join the chain; it becomes the
  // most recently used entry.
  Status Insert(PrefixEntry entry);
  // Removes the entry (its blocks leave the chain where no other entry has them). NotFound for
  // an unknown id; FailedPrecondition while a job holds it.
  Status Remove(uint64_t id);
  bool Contains(uint64_t id) const;
  const PrefixEntry* Find(uint64_t id) const;

  // The longest reuse of `prompt` under `key`: the largest L over every entry with that key
  // such that prompt[0, L) == entry.tokens[0, L), L is one of the entry's reuse lengths, L is
  // at least one block (L >= block_tokens) and L <= prompt.size() - 1 (a job must prefill at
  // least its last token). Ties: the most recently used entry. The chain finds the candidates
  // (every entry sharing the prompt's first block under the key, deepest blocks first); their
  // tokens are compared to confirm, and the match may run past the last whole block up to the
  // entry's length. A hit counts as a use (most recently used) and in the entry's hits. Entries
  // with another key never match.
  PrefixHit Lookup(uint64_t key, std::span<const int32_t> prompt);
  // What Lookup would return, not counted as a use.
  PrefixHit Peek(uint64_t key, std::span<const int32_t> prompt) const;

  // Holders: a job that will restore from the entry holds it from lookup until its start
  // (neither eviction nor Remove takes a held entry). Release below zero is InvalidArgument.
  Status Acquire(uint64_t id);
  Status Release(uint64_t id);
  // Pinned entries stay until unpinned (never in EvictionOrder). NotFound for unknown ids.
  Status SetPinned(uint64_t id, bool pinned);

  // Entries that may be evicted (not pinned, not held), least recently used first.
  std::vector<uint64_t> EvictionOrder() const;
  // Every entry, most recently used first.
  std::vector<PrefixEntryInfo> List() const;
  // One entry's, or none for an unknown id.
  std::optional<PrefixEntryInfo> Info(uint64_t id) const;
  int64_t size() const;
  // Sum of cost_per_rank over the entries, and over the evictable ones.
  int64_t cost_per_rank() const;
  int64_t evictable_cost_per_rank() const;

 private:
  struct Slot {
    PrefixEntry entry;
    std::vector<uint64_t> chain;  // the chain hash of each whole block of entry.tokens
    bool pinned = false;
    int64_t holders = 0;
    uint64_t last_use = 0;
    int64_t hits = 0;
  };
  // An entry Lookup may return: `bound` is at least what it can reuse (its tokens past
  // `believed` compared, the `believed` before them agreeing by hash only).
  struct Candidate {
    const Slot* slot = nullptr;
    int64_t believed = 0;
    int64_t bound = 0;
  };
  explicit PrefixIndex(int64_t block_tokens) : block_tokens_(block_tokens) {}
  // Chain hashes of the whole blocks of `tokens` under `key`; with known_only, only while each
  // is in blocks_.
  std::vector<uint64_t> Chain(uint64_t key, std::span<const int32_t> tokens,
                              bool known_only) const;
  // Every entry under `key` holding the prompt's first block, with its bound (bound > 0 only).
  std::vector<Candidate> Candidates(uint64_t key, std::span<const int32_t> prompt,
                                    std::span<const uint64_t> hashes) const;
  // The reuse `candidate` gives once its tokens are compared.
  int64_t Confirm(const Candidate& candidate, std::span<const int32_t> prompt) const;
  // The largest reuse length of `entry` <= `match` and >= block_tokens_ (0: none).
  int64_t Reusable(const PrefixEntry& entry, int64_t match) const;
  // Makes `slot` the most recently used entry.
  void Touch(Slot& slot);
  bool Evictable(const Slot& slot) const { return !slot.pinned && slot.holders == 0; }
  static PrefixEntryInfo InfoOf(const Slot& slot);

  int64_t block_tokens_ = 1;
  std::unordered_map<uint64_t, Slot> slots_;                    // by entry id
  std::unordered_map<uint64_t, std::vector<uint64_t>> blocks_;  // chain hash -> entry ids
  std::map<uint64_t, uint64_t> by_use_;                         // last_use -> entry id
  uint64_t uses_ = 0;                                           // the Touch counter
};

}  // namespace millipede
