// What the front ends and tools read of a model besides its weights, from either layout that
// --model takes: a Hugging Face directory (tokenizer.json; the chat template is read by
// http/chat_template.h) or one GGUF file (its tokenizer.ggml.* vocabulary and
// tokenizer.chat_template).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "checkpoint/gguf.h"
#include "common/status.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/tokenizer.h"

namespace millipede {

// The tokenizer.ggml.* keys of `file` (tokens and model required, the rest when present).
// InvalidArgument naming the file and the key for a wrong type.
StatusOr<GgufVocab> ReadGgufVocab(const GgufFile& file);

// The tokenizer of the model at `path`: the directory's tokenizer.json, or the GGUF file's
// vocabulary (TokenizerFromGgufVocab). NotFound naming what is missing when the model has none;
// InvalidArgument when `path` does not exist or is a file other than GGUF.
StatusOr<std::unique_ptr<Tokenizer>> LoadModelTokenizer(const std::string& path);

// A GGUF file's chat template and the special tokens templates are given (bos_token, eos_token,
// unk_token, pad_token: the vocabulary's spelling of the ids the file names).
struct GgufChatTemplate {
  std::optional<std::string> text;  // tokenizer.chat_template; nullopt when the file has none
  std::map<std::string, std::string> special_tokens;
};
StatusOr<GgufChatTemplate> ReadGgufChatTemplate(const GgufFile& file);

}  // namespace millipede
