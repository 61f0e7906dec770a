// Unicode data for NFC, generated into unicode_tables.cc by gen_unicode_tables.py.
#pragma once

#include <cstddef>
#include <cstdint>

namespace millipede::tokenizer_internal {

// A run of code points [first, last] sharing one non-zero canonical combining class.
struct CccRange {
  uint32_t first;
  uint32_t last;
  uint8_t ccc;
};

// The full (recursive) canonical decomposition of `cp`: kDecompositionPool[offset, offset+length).
struct Decomposition {
  uint32_t cp;
  uint16_t offset;
  uint8_t length;
};

// `first` + `second` compose canonically to `composite` (composition exclusions left out).
struct CompositionPair {
  uint32_t first;
  uint32_t second;
  uint32_t composite;
};

extern const char kUnicodeTablesVersion[];
// All three tables are sorted by their first field(s) for binary search; Hangul is not in them.
extern const CccRange kCccRanges[];
extern const size_t kCccRangeCount;
extern const uint32_t kDecompositionPool[];
extern const Decomposition kDecompositions[];
extern const size_t kDecompositionCount;
extern const CompositionPair kCompositionPairs[];
extern const size_t kCompositionPairCount;

}  // namespace millipede::tokenizer_internal
