#include "tokenizer/decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace millipede {

StreamingDecoder::StreamingDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer),
      skip_special_tokens_(skip_special_tokens),
      state_(tokenizer.decoder_->NewState()) {}

StatusOr<std::string> StreamingDecoder::Push(int32_t id) {
  MP_ASSIGN_OR_RETURN(std::optional<std::string_view> token,
                      tokenizer_.DecodedToken(id, skip_special_tokens_));
  if (token) tokenizer_.decoder_->Push(*token, &state_, &pending_);
  std::string text;
  size_t consumed = tokenizer_internal::AppendUtf8Lossy(pending_, /*final=*/false, &text);
  pending_.erase(0, consumed);
  return text;
}

std::string StreamingDecoder::Finish() {
  tokenizer_.decoder_->Finish(&state_, &pending_);
  std::string text;
  tokenizer_internal::AppendUtf8Lossy(pending_, /*final=*/true, &text);
  pending_.clear();
  return text;
}

}  // namespace millipede
