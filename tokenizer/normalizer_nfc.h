// Unicode Normalization Form C without ICU, from the tables in unicode_tables.cc.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace millipede::tokenizer_internal {

// The canonical combining class of `cp` (0 for starters and unassigned code points).
uint8_t CanonicalCombiningClass(char32_t cp);

// True when `text` (valid UTF-8) is certainly already in NFC: no character in it can decompose,
// reorder or compose with its neighbour. A false answer only means "run NfcNormalize".
bool IsNfcQuick(std::string_view text);

// Returns the NFC form of `text`, which must be valid UTF-8.
std::string NfcNormalize(std::string_view text);

}  // namespace millipede::tokenizer_internal
