#include "tests/fuzz/mutator.h"

#include <cctype>
#include <cstring>

#include "tests/fuzz/seed_corpus.h"

namespace millipede::fuzz {
namespace {

constexpr size_t kMaxSize = 1 << 20;

const char* const kTokens[] = {"\"",
                               "\\",
                               "{",
                               "}",
                               "[",
                               "]",
                               ":",
                               ",",
                               "\\u",
                               "\\ud800",
                               "\r\n",
                               "\r\n\r\n",
                               "0\r\n\r\n",
                               "null",
                               "true",
                               "-",
                               "e",
                               "Transfer-Encoding: chunked\r\n",
                               "Content-Length: 0\r\n",
                               "\xff",
                               "\xc0",
                               "\xed\xa0\x80",
                               "\0"};

}  // namespace

std::string Mutator::Mutate(const std::string& input, const std::vector<std::string>& corpus) {
  std::string data = input;
  const size_t rounds = 1 + Below(4);
  const size_t blank = data.find("\r\n\r\n");
  if (kind_ == Kind::kText && blank != std::string::npos && Below(4) != 0) {
    // Most changes go to the body, behind a head that still parses, with a matching length.
    std::string body = data.substr(blank + 4);
    for (size_t i = 0; i < rounds; ++i) MutateOnce(&body, corpus);
    data = data.substr(0, blank + 4) + body;
    FixContentLength(&data);
  } else {
    for (size_t i = 0; i < rounds; ++i) MutateOnce(&data, corpus);
    if (kind_ == Kind::kText && Below(2) == 0) FixContentLength(&data);
  }
  if (data.size() > kMaxSize) data.resize(kMaxSize);
  return data;
}

void Mutator::MutateOnce(std::string* data, const std::vector<std::string>& corpus) {
  const size_t size = data->size();
  switch (Below(kind_ == Kind::kText ? 9 : 7)) {
    case 0:
      return FlipBits(data);
    case 1:
      return SetInteresting(data);
    case 2: {  // erase a range
      const size_t at = Below(size + 1), n = Below(std::min<size_t>(size - at, 64) + 1);
      data->erase(at, n);
      return;
    }
    case 3: {  // duplicate a range
      const size_t at = Below(size + 1), n = Below(std::min<size_t>(size - at, 64) + 1);
      data->insert(Below(size + 1), data->substr(at, n));
      return;
    }
    case 4: {  // random bytes
      std::string bytes(1 + Below(16), '\0');
      for (char& c : bytes) c = static_cast<char>(Below(256));
      data->insert(Below(size + 1), bytes);
      return;
    }
    case 5:
      return Splice(data, corpus);
    case 6:
      data->resize(Below(size + 1));
      return;
    case 7:
      return InsertEdgeText(data);
    default:
      return ReplaceNumber(data);
  }
}

void Mutator::FlipBits(std::string* data) {
  if (data->empty()) return;
  for (size_t i = 0, n = 1 + Below(4); i < n; ++i) {
    (*data)[Below(data->size())] ^= static_cast<char>(1u << Below(8));
  }
}

void Mutator::SetInteresting(std::string* data) {
  if (data->empty()) return;
  if (kind_ == Kind::kWords && data->size() >= 8) {
    // A whole word: a pointer-like or boundary value at a word boundary.
    static const uint64_t kWords[] = {0,
                                      ~uint64_t{0},
                                      0x7fffffffffffffff,
                                      0x8000000000000000,
                                      0x00000001fffffffc,  // struct pointer, offset -1
                                      0xffffffff00000001,  // list pointer, huge count
                                      0x0000000500000002,  // far pointer to segment 5
                                      0x0001000100000000,
                                      0x7fc00000,  // NaN as Float32
                                      0x7f800000};
    const uint64_t w = kWords[Below(sizeof(kWords) / sizeof(kWords[0]))];
    std::memcpy(data->data() + Below(data->size() / 8) * 8, &w, 8);
    return;
  }
  static const unsigned char kBytes[] = {0,   1,   0x7f, 0x80, 0xff, '"',  '\\', '{', '[', '0',
                                         '9', '-', 'e',  '.',  ' ',  '\r', '\n', ':', ';'};
  (*data)[Below(data->size())] = static_cast<char>(kBytes[Below(sizeof(kBytes))]);
}

void Mutator::InsertEdgeText(std::string* data) {
  std::string text;
  switch (Below(4)) {
    case 0: {
      const auto& numbers = NumberEdgeCases();
      text = numbers[Below(numbers.size())];
      break;
    }
    case 1: {
      const auto& strings = StringEdgeCases();
      text = strings[Below(strings.size())];
      break;
    }
    case 2: {
      const size_t depth = 1 + Below(200);
      text = std::string(depth, Below(2) == 0 ? '[' : '{');
      break;
    }
    default:
      text = kTokens[Below(sizeof(kTokens) / sizeof(kTokens[0]))];
      if (text.empty()) text.push_back('\0');
      break;
  }
  data->insert(Below(data->size() + 1), text);
}

void Mutator::ReplaceNumber(std::string* data) {
  // The first run of digits at or after a random place.
  size_t at = Below(data->size() + 1);
  while (at < data->size() && !std::isdigit(static_cast<unsigned char>((*data)[at]))) ++at;
  if (at == data->size()) return InsertEdgeText(data);
  size_t end = at;
  while (end < data->size() && std::isdigit(static_cast<unsigned char>((*data)[end]))) ++end;
  const auto& numbers = NumberEdgeCases();
  data->replace(at, end - at, numbers[Below(numbers.size())]);
}

void Mutator::Splice(std::string* data, const std::vector<std::string>& corpus) {
  if (corpus.empty()) return;
  const std::string& other = corpus[Below(corpus.size())];
  size_t cut = Below(data->size() + 1), from = Below(other.size() + 1);
  if (kind_ == Kind::kWords) {
    cut -= cut % 8;
    from -= from % 8;
  }
  data->resize(cut);
  data->append(other, from, std::string::npos);
}

void Mutator::FixContentLength(std::string* data) {
  const std::string key = "Content-Length: ";
  const size_t header = data->find(key);
  const size_t blank = data->find("\r\n\r\n");
  if (header == std::string::npos || blank == std::string::npos || header > blank) return;
  const size_t value = header + key.size();
  const size_t line_end = data->find("\r\n", value);
  const size_t body = data->size() - (blank + 4);
  data->replace(value, line_end - value, std::to_string(body));
}

}  // namespace millipede::fuzz
