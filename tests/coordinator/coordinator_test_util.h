// Helpers for the coordinator's unit tests.
#pragma once

#include <memory>

#include "tests/tokenizer/tokenizer_test_util.h"
#include "tokenizer/tokenizer.h"

namespace millipede::coordinator_test {

// A byte-level tokenizer without merges: token id b is byte b, so tests spell ids as bytes.
inline std::unique_ptr<Tokenizer> ByteTokenizer() {
  auto t = Tokenizer::FromJson(tokenizer_test::ByteLevelTokenizerJson({}).dump(), "bytes");
  return std::move(t).value();
}

}  // namespace millipede::coordinator_test
