#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace millipede::tokenizer_internal {
namespace {

bool StandsForItself(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Alphabet {
  std::array<std::string, 256> chars;  // byte -> UTF-8 of its character
  // Code point -> byte for the 324 code points the alphabet uses (-1 elsewhere).
  std::array<int16_t, 0x144> bytes;

  Alphabet() {
    bytes.fill(-1);
    char32_t next_extra = 0x100;
    for (int b = 0; b < 256; ++b) {
      char32_t cp = StandsForItself(b) ? static_cast<char32_t>(b) : next_extra++;
      AppendUtf8(cp, &chars[b]);
      bytes[cp] = static_cast<int16_t>(b);
    }
  }
};

const Alphabet& GetAlphabet() {
  static const Alphabet alphabet;
  return alphabet;
}

}  // namespace

std::string_view ByteLevelChar(uint8_t b) { return GetAlphabet().chars[b]; }

void AppendByteLevel(std::string_view bytes, std::string* out) {
  const Alphabet& alphabet = GetAlphabet();
  for (char c : bytes) out->append(alphabet.chars[static_cast<uint8_t>(c)]);
}

bool AppendBytesFromByteLevel(std::string_view token, std::string* out) {
  const Alphabet& alphabet = GetAlphabet();
  size_t start = out->size();
  size_t pos = 0;
  while (pos < token.size()) {
    char32_t cp = DecodeUtf8At(token, &pos);
    if (cp >= alphabet.bytes.size() || alphabet.bytes[cp] < 0) {
      out->resize(start);
      return false;
    }
    out->push_back(static_cast<char>(alphabet.bytes[cp]));
  }
  return true;
}

}  // namespace millipede::tokenizer_internal
