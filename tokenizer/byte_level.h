// The GPT-2 byte-level alphabet: every byte is shown as one printable character so that BPE
// vocabularies can be stored as text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace millipede::tokenizer_internal {

// The UTF-8 text of the character that stands for byte `b` (printable ASCII and most of
// Latin-1 stand for themselves; the rest map to U+0100 and up, e.g. ' ' -> 'Ġ').
std::string_view ByteLevelChar(uint8_t b);

// Appends the byte-level spelling of `bytes` to `out`.
void AppendByteLevel(std::string_view bytes, std::string* out);

// Appends the bytes that byte-level `token` spells and returns true; returns false (appending
// nothing) when some character of `token` is outside the alphabet.
bool AppendBytesFromByteLevel(std::string_view token, std::string* out);

}  // namespace millipede::tokenizer_internal
