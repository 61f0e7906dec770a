// Deterministic mutations of seed inputs for the randomized test: bit flips, interesting bytes
// and words, erased, duplicated and random ranges, splices of two seeds, truncation, and for
// text, number edge cases and deep nesting written into the input. Most text mutations change an
// HTTP request's body only and make its Content-Length match, so that they reach the JSON parser.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace millipede::fuzz {

class Mutator {
 public:
  enum class Kind { kText, kWords };  // HTTP requests, Cap'n Proto messages

  Mutator(uint64_t seed, Kind kind) : rng_(seed), kind_(kind) {}

  // One to four mutations of `input`; `corpus` provides splice partners.
  std::string Mutate(const std::string& input, const std::vector<std::string>& corpus);

 private:
  size_t Below(size_t n) {
    return n == 0 ? 0 : std::uniform_int_distribution<size_t>(0, n - 1)(rng_);
  }
  void MutateOnce(std::string* data, const std::vector<std::string>& corpus);
  void FlipBits(std::string* data);
  void SetInteresting(std::string* data);
  void InsertEdgeText(std::string* data);
  void ReplaceNumber(std::string* data);
  void Splice(std::string* data, const std::vector<std::string>& corpus);
  void FixContentLength(std::string* data);

  std::mt19937_64 rng_;
  Kind kind_;
};

}  // namespace millipede::fuzz
