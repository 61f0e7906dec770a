// Open-addressing hash tables for the BPE hot paths: token text -> id and (id, id) -> merge.
// std::unordered_map spends most of its time chasing nodes here; flat probing keeps vocabulary
// loading and encoding cache-friendly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace millipede::tokenizer_internal {

// Maps strings to non-negative ids and keeps the strings in one arena.
class TokenTable {
 public:
  void Reserve(size_t count);
  // Adds `token` -> `id` unless `token` is present already; returns whether it was added.
  bool Insert(std::string_view token, int32_t id);
  // The id of `token`, or -1.
  int32_t Find(std::string_view token) const;
  size_t size() const { return size_; }

 private:
  struct Slot {
    uint32_t offset;
    uint32_t length;
    int32_t id;  // -1: empty
    uint32_t hash_tag;
  };
  void Grow();
  std::string_view KeyOf(const Slot& slot) const {
    return {arena_.data() + slot.offset, slot.length};
  }

  std::string arena_;
  std::vector<Slot> slots_;
  size_t size_ = 0;
};

// Maps a pair of ids to the rank of their merge and the id it produces.
class MergeTable {
 public:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };

  void Reserve(size_t count);
  // Sets the merge for (a, b), replacing an earlier one.
  void Assign(int32_t a, int32_t b, Merge merge);
  // The merge for (a, b), or nullptr.
  const Merge* Find(int32_t a, int32_t b) const;

 private:
  struct Slot {
    uint64_t key;  // kEmptyKey: empty
    Merge merge;
  };
  static constexpr uint64_t kEmptyKey = ~uint64_t{0};
  static uint64_t Key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void Grow();

  std::vector<Slot> slots_;
  size_t size_ = 0;
};

}  // namespace millipede::tokenizer_internal
