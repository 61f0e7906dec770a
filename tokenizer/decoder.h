// The tokenizer.json "decoder" section: turns the tokens of decoded ids into text.
//
// Hugging Face runs a chain of decoders over the whole list of tokens and joins the result. Here
// each step is a small state machine that receives the tokens one at a time (whole, or as pieces
// once an earlier step has fused them) and passes on what can no longer change. Decoding a list
// at once and streaming it token by token therefore run the same code, and produce the same
// text by construction. Steps hold text back only where HF's result depends on what follows:
// a run of <0xXX> tokens (ByteFallback), the tail of a token that may still match a Replace
// pattern or be stripped (Strip), a token a step needs whole (ByteLevel after a Fuse).
//
// One deliberate difference: HF 0.21's Strip panics where its trailing cut runs past the start
// of a token (an empty token, as a Fuse makes of an empty list, or a token made only of the
// stripped character and shorter than start + stop); here the cuts simply do not overlap.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/json_util.h"
#include "common/status.h"
#include "tokenizer/decode_state.h"

namespace millipede::tokenizer_internal {

class Decoder {
 public:
  ~Decoder();

  // Parses the "decoder" value: null (tokens joined with spaces, as HF does without a decoder),
  // ByteLevel, ByteFallback, Fuse, Replace (String pattern), Strip, Metaspace, or a Sequence of
  // those. Other types, and Replace with a Regex pattern, are Unimplemented errors naming them.
  static StatusOr<std::unique_ptr<Decoder>> FromJson(const Json& json, const std::string& what);

  DecodeState NewState() const;
  // Feeds one token; appends to `out` the bytes that are final (the caller repairs UTF-8).
  void Push(std::string_view token, DecodeState* state, std::string* out) const;
  // Ends the list: appends everything still held back and resets `state`.
  void Finish(DecodeState* state, std::string* out) const;

 private:
  struct Step;
  Decoder();
  static Status CollectSteps(const Json& json, const std::string& what, int depth,
                             std::vector<Step>* steps);
  // Gives step `index` part of a token (`end`: the token is complete).
  void Feed(size_t index, std::string_view text, bool end, DecodeState* state,
            std::string* out) const;
  void FinishFrom(size_t index, DecodeState* state, std::string* out) const;
  // ByteFallback at step `index`: passes on its pending run of byte tokens.
  void FlushByteRun(size_t index, DecodeState* state, std::string* out) const;

  std::vector<Step> steps_;
};

}  // namespace millipede::tokenizer_internal
