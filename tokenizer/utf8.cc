#include "tokenizer/utf8.h"

namespace millipede::tokenizer_internal {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";

// The allowed range of the second byte of a sequence, which is where overlongs, surrogates and
// values above U+10FFFF are ruled out; later continuation bytes are always 0x80..0xBF.
struct LeadInfo {
  int continuation_bytes;  // -1: cannot start a sequence
  unsigned char second_lo;
  unsigned char second_hi;
};

LeadInfo InfoForLead(unsigned char b) {
  if (b < 0x80) return {0, 0, 0};
  if (b < 0xC2) return {-1, 0, 0};
  if (b < 0xE0) return {1, 0x80, 0xBF};
  if (b == 0xE0) return {2, 0xA0, 0xBF};
  if (b == 0xED) return {2, 0x80, 0x9F};
  if (b < 0xF0) return {2, 0x80, 0xBF};
  if (b == 0xF0) return {3, 0x90, 0xBF};
  if (b < 0xF4) return {3, 0x80, 0xBF};
  if (b == 0xF4) return {3, 0x80, 0x8F};
  return {-1, 0, 0};
}

// How many bytes after the lead at `pos` continue a valid sequence (stops at the first bad one
// or at the end of the text).
int ValidContinuations(std::string_view text, size_t pos, const LeadInfo& info) {
  int good = 0;
  for (int k = 1; k <= info.continuation_bytes; ++k) {
    if (pos + k >= text.size()) break;
    unsigned char c = static_cast<unsigned char>(text[pos + k]);
    unsigned char lo = k == 1 ? info.second_lo : 0x80;
    unsigned char hi = k == 1 ? info.second_hi : 0xBF;
    if (c < lo || c > hi) break;
    ++good;
  }
  return good;
}

}  // namespace

size_t FindInvalidUtf8(std::string_view text) {
  size_t i = 0;
  const size_t n = text.size();
  while (i < n) {
    unsigned char b = static_cast<unsigned char>(text[i]);
    if (b < 0x80) {
      ++i;
      continue;
    }
    LeadInfo info = InfoForLead(b);
    if (info.continuation_bytes < 0) return i;
    if (ValidContinuations(text, i, info) != info.continuation_bytes) return i;
    i += 1 + info.continuation_bytes;
  }
  return std::string_view::npos;
}

char32_t DecodeUtf8At(std::string_view text, size_t* pos) {
  size_t i = *pos;
  unsigned char b = static_cast<unsigned char>(text[i]);
  size_t len = Utf8SequenceLength(b);
  char32_t cp = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
  for (size_t k = 1; k < len; ++k)
    cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
  *pos = i + len;
  return cp;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t AppendUtf8Lossy(std::string_view bytes, bool final, std::string* out) {
  size_t i = 0;
  const size_t n = bytes.size();
  while (i < n) {
    size_t run = i;
    while (run < n && static_cast<unsigned char>(bytes[run]) < 0x80) ++run;
    out->append(bytes.data() + i, run - i);
    i = run;
    if (i == n) break;
    LeadInfo info = InfoForLead(static_cast<unsigned char>(bytes[i]));
    if (info.continuation_bytes < 0) {
      out->append(kReplacement);
      ++i;
      continue;
    }
    int good = ValidContinuations(bytes, i, info);
    if (good == info.continuation_bytes) {
      out->append(bytes.data() + i, 1 + good);
    } else if (!final && i + 1 + good == n) {
      // A prefix of a valid character cut off by the end of the input: wait for more bytes.
      return i;
    } else {
      out->append(kReplacement);
    }
    i += 1 + good;
  }
  return n;
}

bool IsUnicodeWhiteSpace(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  switch (cp) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

}  // namespace millipede::tokenizer_internal
