// UTF-8 helpers shared by the tokenizer pieces: validation, decoding, lossy repair.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace millipede::tokenizer_internal {

// Byte offset of the first byte that does not start a well-formed UTF-8 sequence (overlongs,
// surrogates and code points above U+10FFFF included), or std::string_view::npos if `text` is
// valid UTF-8.
size_t FindInvalidUtf8(std::string_view text);

// Decodes the character at `*pos` of text already known to be valid UTF-8 and advances `*pos`.
char32_t DecodeUtf8At(std::string_view text, size_t* pos);

// Number of bytes in the UTF-8 sequence that starts with `lead` (1 for stray bytes).
inline size_t Utf8SequenceLength(unsigned char lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

void AppendUtf8(char32_t cp, std::string* out);

// Appends `bytes` to `out` with every ill-formed part replaced by U+FFFD, one replacement per
// maximal ill-formed subsequence (the Unicode recommendation, which Rust's from_utf8_lossy and
// so Hugging Face follow). With `final` false, a trailing sequence that is incomplete but could
// still become valid is left unconsumed. Returns the number of bytes consumed.
size_t AppendUtf8Lossy(std::string_view bytes, bool final, std::string* out);

// Unicode White_Space (what Rust's char::is_whitespace and regex \s accept).
bool IsUnicodeWhiteSpace(char32_t cp);

}  // namespace millipede::tokenizer_internal
