// Turns a job's generated ids into streamed text: UTF-8 characters are completed before they go
// out, special tokens are skipped (like millipede-run), and OpenAI-style stop strings are
// matched across token boundaries (text that might start a stop string is held back until it
// cannot; a match cuts the text before the stop string).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "tokenizer/tokenizer.h"

namespace millipede {

class TextStream {
 public:
  // `tokenizer` must outlive the stream.
  TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop_strings);

  struct Piece {
    std::string delta;     // text that is final now (may be empty)
    bool stopped = false;  // a stop string matched: the text ends here, the job must stop
    bool open = false;     // text is held back (an open UTF-8 sequence or stop-string prefix)
  };
  // Adds one generated id. After a match every further id adds nothing.
  StatusOr<Piece> Push(int32_t id);
  // The held-back text once no more ids come (empty after a match).
  std::string Finish();
  // All text given out so far.
  const std::string& text() const { return text_; }
  // Whether a stop string matched (in Push or in Finish).
  bool stopped() const { return stopped_; }

 private:
  // Moves the final part of `held_` to the output; returns it.
  std::string Release(bool* stopped);

  StreamingDecoder decoder_;
  std::vector<std::string> stops_;
  std::string held_;
  std::string text_;
  bool stopped_ = false;
};

}  // namespace millipede
