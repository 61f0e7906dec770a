// A Hugging Face tokenizer.json (BPE: byte-level like GPT-2 / Llama 3, or SentencePiece-style
// like Llama 2 / Mistral) implemented natively: no Rust, Python or ICU.
//
// Supported: normalizer null / NFC / Prepend / Replace / Sequence; pre_tokenizer ByteLevel /
// Split / Metaspace / Digits / Sequence; the BPE model (string or pair merges, ignore_merges,
// continuing_subword_prefix, end_of_word_suffix, unk_token, fuse_unk, byte_fallback); added
// tokens with their lstrip, rstrip, single_word and normalized flags; decoder null / ByteLevel /
// ByteFallback / Fuse / Replace / Strip / Metaspace / Sequence. Other normalizer,
// pre-tokenizer, model and decoder types are refused at load time with an Unimplemented error
// naming them, so a tokenizer that loads encodes exactly like HF's
// `encode(text, add_special_tokens=False)`. The post_processor is only read for bos_id();
// "truncation" and "padding" are ignored. A GGUF file's vocabulary becomes a Tokenizer through
// gguf_vocab.h.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "tokenizer/decode_state.h"

namespace millipede {

namespace tokenizer_internal {
class AddedVocabulary;
class BpeModel;
class Decoder;
class Normalizer;
class PreTokenizer;
struct ParsedTokenizerJson;
}  // namespace tokenizer_internal

class Tokenizer {
 public:
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Loads a tokenizer.json file.
  static StatusOr<std::unique_ptr<Tokenizer>> FromFile(const std::string& path);
  // Loads tokenizer.json text; `what` names its source in error messages.
  static StatusOr<std::unique_ptr<Tokenizer>> FromJson(std::string_view json_text,
                                                       const std::string& what);
  // Builds from a tokenizer.json already parsed, its BPE vocabulary and merges given apart from
  // the document (tokenizer_json.h): for code that synthesizes one, like gguf_vocab.h.
  static StatusOr<std::unique_ptr<Tokenizer>> FromParsedJson(
      tokenizer_internal::ParsedTokenizerJson parsed, const std::string& what);

  // Text -> ids, like HF encode(text, add_special_tokens=False): added tokens in the text are
  // recognised, post-processor templates are not applied. Invalid UTF-8 is an InvalidArgument
  // error naming the byte offset. Thread-safe.
  StatusOr<std::vector<int32_t>> Encode(std::string_view text) const;

  // Ids -> text, like HF decode(ids, skip_special_tokens). Ids the tokenizer does not know
  // decode to nothing (as in HF: padded model vocabularies); negative ids are an InvalidArgument
  // error; byte sequences that are not valid UTF-8 come out as U+FFFD. Thread-safe.
  StatusOr<std::string> Decode(const std::vector<int32_t>& ids,
                               bool skip_special_tokens = false) const;

  // Largest id over the vocabulary and the added tokens, plus one.
  int32_t vocab_size() const;
  // The id of a vocabulary or added token spelled exactly `token` (byte-level form for BPE
  // vocabulary entries, e.g. "Ġthe").
  std::optional<int32_t> TokenToId(std::string_view token) const;
  // The token spelled by `id` (NotFound error for unknown ids).
  StatusOr<std::string> IdToToken(int32_t id) const;
  // Whether `id` is an added token marked special.
  bool IsSpecial(int32_t id) const;
  // The token a TemplateProcessing post-processor puts before the text ("single" template),
  // when the file has one; Encode never adds it.
  std::optional<int32_t> bos_id() const { return bos_id_; }

 private:
  friend class StreamingDecoder;

  // Ids of pre-tokenized pieces already run through BPE during one Encode call.
  using PieceCache = std::unordered_map<std::string, std::vector<int32_t>>;

  Tokenizer();
  // Encodes normalized text: cuts out normalized added tokens, pre-tokenizes, runs BPE.
  // `at_start`: the text begins the input (no added token before it).
  Status EncodeNormalized(std::string_view text, bool at_start, PieceCache* cache,
                          std::vector<int32_t>* ids) const;
  // The token `id` stands for in decoding: nullopt for skipped special tokens and ids the
  // tokenizer does not know; an error for negative ids.
  StatusOr<std::optional<std::string_view>> DecodedToken(int32_t id,
                                                         bool skip_special_tokens) const;

  std::unique_ptr<tokenizer_internal::Normalizer> normalizer_;
  std::unique_ptr<tokenizer_internal::PreTokenizer> pre_tokenizer_;
  std::unique_ptr<tokenizer_internal::BpeModel> model_;
  std::unique_ptr<tokenizer_internal::AddedVocabulary> added_;
  std::unique_ptr<tokenizer_internal::Decoder> decoder_;
  std::optional<int32_t> bos_id_;
};

// Incremental detokenizer for streaming generation. Push returns the text that is complete so
// far: bytes of a UTF-8 character that is still incomplete are held back until it completes,
// or come out as U+FFFD once it cannot, and so is text the decoder may still change (a run of
// <0xXX> byte tokens, a space a Strip step may remove). The concatenation of all Push results
// and Finish equals Tokenizer::Decode of the same ids. Copyable; not thread-safe; the
// tokenizer must outlive it.
class StreamingDecoder {
 public:
  explicit StreamingDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false);

  // Adds one id (unknown ids add nothing); a negative id is an InvalidArgument error and leaves
  // the state unchanged.
  StatusOr<std::string> Push(int32_t id);
  // Flushes held-back bytes (an incomplete character becomes U+FFFD) and resets the decoder.
  std::string Finish();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_tokens_;
  tokenizer_internal::DecodeState state_;
  std::string pending_;  // decoded bytes not yet a complete character
};

// Parses whitespace-separated non-negative decimal token ids (a --prompt-ids file, a
// `millipede-tokenize --decode` input); the error names the offending word.
StatusOr<std::vector<int32_t>> ParseTokenIds(const std::string& text);

// A prompt's ids, like HF encode(text, add_special_tokens=add_bos): the tokenizer's BOS (its
// post-processor's, when it has one and `add_bos`), then Encode(text). The one place a prompt
// gets its BOS: the front ends, admission and the offline tools all call it.
StatusOr<std::vector<int32_t>> EncodePrompt(const Tokenizer& tokenizer, std::string_view text,
                                            bool add_bos);

}  // namespace millipede
