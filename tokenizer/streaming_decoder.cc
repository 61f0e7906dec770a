#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace millipede {

StreamingDecoder::StreamingDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

StatusOr<std::string> StreamingDecoder::Push(int32_t id) {
  std::string bytes;
  MP_ASSIGN_OR_RETURN(bool emitted,
                      tokenizer_.AppendTokenBytes(id, skip_special_tokens_, first_, &bytes));
  first_ = first_ && !emitted;
  pending_ += bytes;
  std::string text;
  size_t consumed = tokenizer_internal::AppendUtf8Lossy(pending_, /*final=*/false, &text);
  pending_.erase(0, consumed);
  return text;
}

std::string StreamingDecoder::Finish() {
  std::string text;
  tokenizer_internal::AppendUtf8Lossy(pending_, /*final=*/true, &text);
  pending_.clear();
  first_ = true;
  return text;
}

}  // namespace millipede
