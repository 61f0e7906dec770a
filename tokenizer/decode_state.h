// The mutable part of decoding ids to text: what each step of a tokenizer.json "decoder" holds
// back between tokens. Plain values, so that a StreamingDecoder can be copied.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace millipede::tokenizer_internal {

struct DecodeStepState {
  std::string buffer;        // text of the current token held back (partial match, whole token)
  std::string byte_run;      // ByteFallback: bytes of the current run of <0xXX> tokens
  size_t tokens_seen = 0;    // tokens this step has received completely
  bool in_token = false;     // part of the current token has been received
  size_t stripped = 0;       // Strip: leading characters removed from the current token
  bool leading_done = false; // Strip: the current token's leading run has ended
  size_t held = 0;           // Strip: trailing `content` characters held back
};

// One entry per decoder step (see Decoder in decoder.h).
struct DecodeState {
  std::vector<DecodeStepState> steps;
};

}  // namespace millipede::tokenizer_internal
