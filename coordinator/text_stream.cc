#include "coordinator/text_stream.h"

#include <algorithm>

namespace millipede {

TextStream::TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop_strings)
    : decoder_(tokenizer, /*skip_special_tokens=*/true) {
  for (std::string& s : stop_strings)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string TextStream::Release(bool* stopped) {
  // Text already given out never ends in a proper prefix of a stop string (that part is held),
  // so a match starts inside held_.
  size_t match = std::string::npos;
  for (const std::string& s : stops_) match = std::min(match, held_.find(s));
  std::string out;
  if (match != std::string::npos) {
    out = held_.substr(0, match);
    held_.clear();
    *stopped = true;
  } else {
    // Hold the longest suffix that is a proper prefix of some stop string.
    size_t keep = 0;
    for (const std::string& s : stops_) {
      for (size_t len = std::min(s.size() - 1, held_.size()); len > keep; --len) {
        if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
          keep = len;
          break;
        }
      }
    }
    out = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
  }
  text_ += out;
  return out;
}

StatusOr<TextStream::Piece> TextStream::Push(int32_t id) {
  Piece piece;
  if (stopped_) {
    piece.stopped = true;
    return piece;
  }
  MP_ASSIGN_OR_RETURN(std::string bytes, decoder_.Push(id));
  held_ += bytes;
  piece.delta = Release(&piece.stopped);
  stopped_ = piece.stopped;
  if (!stopped_) {
    // Whether the decoder still holds bytes of an incomplete character: ask a copy.
    StreamingDecoder probe = decoder_;
    piece.open = !held_.empty() || !probe.Finish().empty();
  }
  return piece;
}

std::string TextStream::Finish() {
  if (stopped_) return "";
  held_ += decoder_.Finish();
  // No more text can come: a partial stop string stays text, a full one still cuts.
  bool stopped = false;
  std::string out = Release(&stopped);
  if (!stopped) {
    out += held_;
    text_ += held_;
    held_.clear();
  }
  stopped_ = stopped;
  return out;
}

}  // namespace millipede
