// Which decode steps an engine records and replays (CUDA graphs on a GPU), as bookkeeping apart
// from the engine: the rows a recorded step's attention spans, the key that says two steps may
// share a recording, and the policy — run a key's first step as usual, record its second, replay
// it from then on; keep the most recently used recordings up to a limit.
//
// A recorded decode step reads everything that changes from token to token from backend memory
// uploaded before each replay (ids, positions, each token's cache row and each sequence's length);
// what the recording fixes is the step's shape: which sequences, in which order, their KV buffers,
// and how many rows each attention call spans (its bucket). A sequence's bucket grows in steps of
// an eighth of its length (at least kMinBucketRows), so one recording serves many tokens and the
// attention splits it plans cover at most a few rows without keys.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <vector>

#include "worker/backend/backend.h"

namespace millipede {

// The rows a recorded attention call spans for a sequence of `rows` rows (the token's included)
// in a store of `capacity` rows: `rows` rounded up to a multiple of its bucket step (the largest
// power of two at most rows / 8, and at least kMinBucketRows), at most `capacity`. Requires
// 0 < rows <= capacity.
inline constexpr int64_t kMinBucketRows = 256;
int64_t DecodeGraphBucket(int64_t rows, int64_t capacity);

// What identifies a recording: per entry (sequence id, bucket, RoPE table address), then the
// epochs of the buffers the recording points into.
struct DecodeGraphKey {
  std::vector<int64_t> values;
  bool operator<(const DecodeGraphKey& o) const { return values < o.values; }
  bool operator==(const DecodeGraphKey& o) const { return values == o.values; }
};

class DecodeGraphCache {
 public:
  enum class Action {
    kRun,     // run the step's ops as usual (a key seen for the first time, or refused)
    kRecord,  // record the step's ops, then replay them (the key's second step)
    kReplay,  // replay the key's recording (Find)
  };
  explicit DecodeGraphCache(size_t limit = 8) : limit_(limit) {}
  static constexpr size_t kMaxSeen = 4096;

  // What to do with a step of `key`; counts the key as seen.
  Action Next(const DecodeGraphKey& key);
  // The key's recording (after kReplay), or null.
  const RecordedOps* Find(const DecodeGraphKey& key);
  // Keeps the key's recording, dropping the least recently used beyond the limit.
  void Store(const DecodeGraphKey& key, std::unique_ptr<RecordedOps> ops);
  // The key could not be recorded: its steps run as usual from now on.
  void Refuse(const DecodeGraphKey& key);
  // Drops every recording and what was seen (sequences started or ended: buffers move).
  void Clear();
  size_t size() const { return recordings_.size(); }

 private:
  struct Recording {
    std::unique_ptr<RecordedOps> ops;
    std::list<DecodeGraphKey>::iterator use;  // in uses_, most recent first
  };
  size_t limit_;
  std::map<DecodeGraphKey, Recording> recordings_;
  std::list<DecodeGraphKey> uses_;
  std::map<DecodeGraphKey, bool> seen_;  // key -> refused
};

}  // namespace millipede
