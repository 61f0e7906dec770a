#include "tokenizer/flat_tables.h"

#include <functional>

namespace millipede::tokenizer_internal {
namespace {

// Tables are kept at most half full so probe sequences stay short.
size_t CapacityFor(size_t count) {
  size_t capacity = 16;
  while (capacity < count * 2) capacity <<= 1;
  return capacity;
}

uint64_t MixBits(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

uint64_t HashString(std::string_view s) { return std::hash<std::string_view>()(s); }

}  // namespace

void TokenTable::Reserve(size_t count) {
  if (CapacityFor(count) <= slots_.size()) return;
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(CapacityFor(count), Slot{0, 0, -1, 0});
  const size_t mask = slots_.size() - 1;
  for (const Slot& slot : old) {
    if (slot.id < 0) continue;
    size_t i = HashString(KeyOf(slot)) & mask;
    while (slots_[i].id >= 0) i = (i + 1) & mask;
    slots_[i] = slot;
  }
}

void TokenTable::Grow() { Reserve(slots_.empty() ? 8 : slots_.size()); }

bool TokenTable::Insert(std::string_view token, int32_t id) {
  if ((size_ + 1) * 2 > slots_.size()) Grow();
  const uint64_t hash = HashString(token);
  const uint32_t tag = static_cast<uint32_t>(hash >> 32);
  const size_t mask = slots_.size() - 1;
  size_t i = hash & mask;
  for (; slots_[i].id >= 0; i = (i + 1) & mask) {
    if (slots_[i].hash_tag == tag && KeyOf(slots_[i]) == token) return false;
  }
  slots_[i] =
      Slot{static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(token.size()), id, tag};
  arena_.append(token);
  ++size_;
  return true;
}

int32_t TokenTable::Find(std::string_view token) const {
  if (slots_.empty()) return -1;
  const uint64_t hash = HashString(token);
  const uint32_t tag = static_cast<uint32_t>(hash >> 32);
  const size_t mask = slots_.size() - 1;
  for (size_t i = hash & mask; slots_[i].id >= 0; i = (i + 1) & mask) {
    if (slots_[i].hash_tag == tag && KeyOf(slots_[i]) == token) return slots_[i].id;
  }
  return -1;
}

void MergeTable::Reserve(size_t count) {
  if (CapacityFor(count) <= slots_.size()) return;
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(CapacityFor(count), Slot{kEmptyKey, {0, 0}});
  const size_t mask = slots_.size() - 1;
  for (const Slot& slot : old) {
    if (slot.key == kEmptyKey) continue;
    size_t i = MixBits(slot.key) & mask;
    while (slots_[i].key != kEmptyKey) i = (i + 1) & mask;
    slots_[i] = slot;
  }
}

void MergeTable::Grow() { Reserve(slots_.empty() ? 8 : slots_.size()); }

void MergeTable::Assign(int32_t a, int32_t b, Merge merge) {
  if ((size_ + 1) * 2 > slots_.size()) Grow();
  const uint64_t key = Key(a, b);
  const size_t mask = slots_.size() - 1;
  size_t i = MixBits(key) & mask;
  for (; slots_[i].key != kEmptyKey; i = (i + 1) & mask) {
    if (slots_[i].key == key) {
      slots_[i].merge = merge;
      return;
    }
  }
  slots_[i] = Slot{key, merge};
  ++size_;
}

const MergeTable::Merge* MergeTable::Find(int32_t a, int32_t b) const {
  if (slots_.empty()) return nullptr;
  const uint64_t key = Key(a, b);
  const size_t mask = slots_.size() - 1;
  for (size_t i = MixBits(key) & mask; slots_[i].key != kEmptyKey; i = (i + 1) & mask) {
    if (slots_[i].key == key) return &slots_[i].merge;
  }
  return nullptr;
}

}  // namespace millipede::tokenizer_internal
