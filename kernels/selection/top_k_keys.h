// A rank's offer to a top-k over several ranks: its own TopK entries of each row as 64-bit keys
// that order every rank's entries alike (the score as TopK orders it, then the lower global
// position), ready to be all-gathered and cut by TopKCut. OmniKV's filter layers pick each KV
// head's tokens over the context-parallel ranks this way, on the device.
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

// Positions [begin, end): a run of the global positions a rank's columns stand for.
struct TopKPositionRange {
  int64_t begin = 0;
  int64_t end = 0;
};

// Most position ranges one call takes (a context-parallel rank holds two runs of the prompt).
inline constexpr int kTopKKeysMaxRanges = 8;

struct TopKKeysArgs {
  // [rows, k] I32: TopK's columns of each row (any order), -1 for an empty slot.
  ConstTensorView index;
  // [rows, k] F32: their scores (TopK's value).
  ConstTensorView value;
  // Column c stands for the c-th position of these ranges taken in order: increasing and
  // disjoint, at most kTopKKeysMaxRanges, every position below 2^32.
  std::span<const TopKPositionRange> ranges;
  // [rows, k] I64, read as unsigned: TopKEntryKey(TopKFloatKey(value), position) for an entry,
  // 0 for an empty slot. A larger key ranks first; keys of distinct positions never tie.
  TensorView keys;
};

// Shapes, dtypes and ranges (not the data, which may live on a device).
Status TopKKeysCheckArgs(const TopKKeysArgs& args);
// Writes keys. A column outside [-1, positions in ranges) is an OutOfRange error, returned
// before anything is written.
Status TopKKeysRef(const TopKKeysArgs& args);

}  // namespace millipede
