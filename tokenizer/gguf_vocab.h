// A Tokenizer from the vocabulary a GGUF file (llama.cpp's model format) carries in its
// tokenizer.ggml.* metadata. The file is read elsewhere (checkpoint/); this layer only sees the
// values, so the tokenizer library keeps depending on nothing but common/.
//
// The vocabulary becomes a tokenizer.json document (Hugging Face semantics) that goes through
// Tokenizer::FromParsedJson, so a GGUF vocabulary encodes and decodes exactly like the HF
// tokenizer that document describes:
//
// model "gpt2" (byte-level BPE): tokens are byte-level spelled ("Ġthe"), merges "a b" in rank
//   order. The pre-tokenizer is the splitting llama.cpp applies for tokenizer.ggml.pre: its
//   regexes as llama.cpp spells them (contractions as '[sS] rather than a caseless (?i:'s),
//   which also takes the long s "ſ"), each splitting the pieces of the one before (HF Split,
//   behavior Isolated), then the byte-level mapping; decoder ByteLevel. Supported names, by
//   family:
//     GPT-2's regex: "gpt-2", "phi-2", "mpt", "olmo"; and an absent `pre`, which is what files
//       written before the key existed mean (llama.cpp itself falls back to a different,
//       "default" regex list there and warns that quality will suffer);
//     Llama 3's regex: "llama-bpe", "llama3", "llama-v3", "falcon3", "pixtral" (these also set
//       ignore_merges, and make BOS the default), "dbrx", "smaug-bpe";
//     Qwen2's regex (digits one by one): "qwen2", "deepseek-r1-qwen", "stablelm2";
//     digits split one by one, then GPT-2's regex: "smollm", "starcoder", "refact", "command-r",
//       "codeshell", "exaone", "minerva-7b".
//   Other names are refused (Unimplemented, naming them). No unk token: like llama.cpp, a
//   character outside the vocabulary (impossible when all 256 byte symbols are in it) vanishes.
//   add_space_prefix is ignored, as llama.cpp does for this model.
// model "llama" (SentencePiece-style): tokens like "▁the", byte tokens "<0x41>", scores. Built
//   the way Hugging Face transformers converts such a file: a BPE whose merges are, for every
//   token, each split into two vocabulary tokens, ranked by the token's score (highest first;
//   ties: vocabulary order, then the two parts' scores, highest first, then split position),
//   with byte_fallback and the unk token (fused). Normalizer: "▁" prepended to each stretch of
//   text between added tokens (unless add_space_prefix is false) and " " replaced by "▁" (HF's
//   "legacy" Llama form; llama.cpp likewise prefixes a space after every special token).
//   Decoder: ByteFallback, Fuse, Replace "▁" -> " ", and Strip of one leading space when the
//   prefix is added. `pre` and `merges` are ignored (llama.cpp does so for this model); absent
//   scores count as 0.
// Both: token types 2 (unknown) and 3 (control) become special added tokens (dropped by
//   Decode with skip_special_tokens), 4 (user-defined) non-special added tokens; all are matched
//   in the raw text before anything else, as llama.cpp does. Types 0, 1, 5 and 6 are plain
//   vocabulary. An empty token string stays out of the vocabulary (its id decodes to nothing).
//   bos_id() is bos_id when add_bos holds: add_bos_token, or when absent, true for "llama" and
//   the Llama 3 names above (llama.cpp's defaults), false otherwise. With add_bos but no
//   bos_id there is no BOS (an explicit add_bos_token = true is an error instead).
//
// Errors (InvalidArgument unless said, naming `what` and the key): an unknown model or pre
// (Unimplemented), no tokens, a token that is not UTF-8 or appears twice, token_type or scores
// of another length than tokens, a token type outside 0..6, a NaN score, an id out of range,
// a gpt2 vocabulary without merges, a merge that is not two vocabulary tokens whose
// concatenation is one.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "tokenizer/tokenizer.h"

namespace millipede {

// The tokenizer metadata of a GGUF file (keys tokenizer.ggml.*), as plain values.
struct GgufVocab {
  std::string model;                 // tokenizer.ggml.model: "gpt2" (byte-level BPE) or "llama"
  std::string pre;                   // tokenizer.ggml.pre; empty when absent
  std::vector<std::string> tokens;   // tokenizer.ggml.tokens
  std::vector<float> scores;         // tokenizer.ggml.scores; empty when absent
  std::vector<int32_t> token_types;  // tokenizer.ggml.token_type; empty when absent
  std::vector<std::string> merges;   // tokenizer.ggml.merges ("left right"); empty when absent
  std::optional<int32_t> bos_id, eos_id, unk_id, pad_id;  // *_token_id (unknown_token_id: unk)
  std::optional<bool> add_bos, add_eos, add_space_prefix;  // add_bos_token, add_eos_token,
                                                           // add_space_prefix
};

// Token types of tokenizer.ggml.token_type.
enum class GgufTokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// Builds the tokenizer (see above); `what` names the source in errors, e.g. the file's path.
StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromGgufVocab(const GgufVocab& vocab,
                                                            const std::string& what);

}  // namespace millipede
