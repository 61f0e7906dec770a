#include "tokenizer/normalizer_nfc.h"

#include <algorithm>
#include <vector>

#include "tokenizer/unicode_tables.h"
#include "tokenizer/utf8.h"

namespace millipede::tokenizer_internal {
namespace {

// Hangul syllables are not in the tables: Unicode defines their (de)composition arithmetically.
constexpr char32_t kSBase = 0xAC00;
constexpr char32_t kLBase = 0x1100;
constexpr char32_t kVBase = 0x1161;
constexpr char32_t kTBase = 0x11A7;
constexpr char32_t kLCount = 19;
constexpr char32_t kVCount = 21;
constexpr char32_t kTCount = 28;
constexpr char32_t kNCount = kVCount * kTCount;
constexpr char32_t kSCount = kLCount * kNCount;

bool IsHangulSyllable(char32_t cp) { return cp >= kSBase && cp < kSBase + kSCount; }

const Decomposition* FindDecomposition(char32_t cp) {
  const Decomposition* end = kDecompositions + kDecompositionCount;
  const Decomposition* it = std::lower_bound(
      kDecompositions, end, cp, [](const Decomposition& d, char32_t c) { return d.cp < c; });
  return it != end && it->cp == cp ? it : nullptr;
}

// Code points that can be the second half of a canonical composition: any text containing one
// may change under NFC even if every character in it is otherwise stable.
const std::vector<char32_t>& CompositionSeconds() {
  static const std::vector<char32_t> seconds = [] {
    std::vector<char32_t> v;
    for (size_t i = 0; i < kCompositionPairCount; ++i) v.push_back(kCompositionPairs[i].second);
    for (char32_t c = kVBase; c < kVBase + kVCount; ++c) v.push_back(c);
    for (char32_t c = kTBase + 1; c < kTBase + kTCount; ++c) v.push_back(c);
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    return v;
  }();
  return seconds;
}

// The primary composite of `a` followed by `b`, or 0 when they do not compose.
char32_t Compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (IsHangulSyllable(a) && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const CompositionPair* end = kCompositionPairs + kCompositionPairCount;
  const CompositionPair* it = std::lower_bound(
      kCompositionPairs, end, std::make_pair(a, b), [](const CompositionPair& p, auto key) {
        return p.first != key.first ? p.first < key.first : p.second < key.second;
      });
  return it != end && it->first == a && it->second == b ? it->composite : 0;
}

void AppendDecomposed(char32_t cp, std::vector<char32_t>* out) {
  if (IsHangulSyllable(cp)) {
    char32_t index = cp - kSBase;
    out->push_back(kLBase + index / kNCount);
    out->push_back(kVBase + (index % kNCount) / kTCount);
    if (index % kTCount != 0) out->push_back(kTBase + index % kTCount);
    return;
  }
  if (cp >= 0xC0) {
    if (const Decomposition* d = FindDecomposition(cp)) {
      out->insert(out->end(), kDecompositionPool + d->offset,
                  kDecompositionPool + d->offset + d->length);
      return;
    }
  }
  out->push_back(cp);
}

// Stable sort of every run of non-starters by combining class (the canonical ordering step).
void CanonicalOrder(std::vector<char32_t>* chars, std::vector<uint8_t>* classes) {
  auto& c = *chars;
  auto& k = *classes;
  for (size_t i = 1; i < c.size(); ++i) {
    if (k[i] == 0) continue;
    for (size_t j = i; j > 0 && k[j - 1] > k[j]; --j) {
      std::swap(c[j - 1], c[j]);
      std::swap(k[j - 1], k[j]);
    }
  }
}

}  // namespace

uint8_t CanonicalCombiningClass(char32_t cp) {
  if (cp < 0x300) return 0;
  const CccRange* end = kCccRanges + kCccRangeCount;
  const CccRange* it = std::lower_bound(kCccRanges, end, cp,
                                        [](const CccRange& r, char32_t c) { return r.last < c; });
  return it != end && it->first <= cp ? it->ccc : 0;
}

bool IsNfcQuick(std::string_view text) {
  const std::vector<char32_t>& seconds = CompositionSeconds();
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    char32_t cp = DecodeUtf8At(text, &pos);
    if (cp < 0xC0) continue;  // Latin-1 symbols: no decomposition, class 0, never a second
    if (FindDecomposition(cp) != nullptr || CanonicalCombiningClass(cp) != 0 ||
        std::binary_search(seconds.begin(), seconds.end(), cp)) {
      return false;
    }
  }
  return true;
}

std::string NfcNormalize(std::string_view text) {
  if (IsNfcQuick(text)) return std::string(text);
  std::vector<char32_t> chars;
  chars.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) AppendDecomposed(DecodeUtf8At(text, &pos), &chars);
  std::vector<uint8_t> classes(chars.size());
  for (size_t i = 0; i < chars.size(); ++i) classes[i] = CanonicalCombiningClass(chars[i]);
  CanonicalOrder(&chars, &classes);

  // Canonical composition: each character may join the last starter unless a character in
  // between blocks it (class 0, or a class not lower than its own).
  size_t out_len = 0;
  std::ptrdiff_t starter = -1;
  uint8_t last_class = 0;
  for (size_t i = 0; i < chars.size(); ++i) {
    char32_t cp = chars[i];
    uint8_t cls = classes[i];
    if (starter >= 0) {
      bool adjacent = static_cast<size_t>(starter) + 1 == out_len;
      if (adjacent || (last_class != 0 && last_class < cls)) {
        if (char32_t composite = Compose(chars[starter], cp)) {
          chars[starter] = composite;
          continue;
        }
      }
    }
    if (cls == 0) starter = static_cast<std::ptrdiff_t>(out_len);
    last_class = cls;
    chars[out_len++] = cp;
  }

  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < out_len; ++i) AppendUtf8(chars[i], &out);
  return out;
}

}  // namespace millipede::tokenizer_internal
