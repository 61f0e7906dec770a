#include "model_files/model_files.h"

#include <cstdint>
#include <filesystem>
#include <limits>
#include <utility>
#include <vector>

#include "checkpoint/gguf_model.h"
#include "common/file_util.h"

namespace millipede {
namespace {

// The reader's errors already name the file and the key. A key the vocabulary needs that is
// absent or of the wrong type makes the file malformed: InvalidArgument (NotFound would read as
// "the model has no tokenizer").
template <typename T>
StatusOr<T> Malformed(StatusOr<T> v) {
  if (v.ok()) return v;
  return InvalidArgumentError(v.status().message());
}

StatusOr<std::optional<int32_t>> OptionalId(const GgufFile& file, const char* key) {
  if (file.Find(key) == nullptr) return std::optional<int32_t>();
  MP_ASSIGN_OR_RETURN(int64_t id, Malformed(file.GetInt(key)));
  MP_REQUIRE(id >= 0 && id <= std::numeric_limits<int32_t>::max(), file.path(), ": ", key, " ",
             id, " is not a token id");
  return std::optional<int32_t>(static_cast<int32_t>(id));
}

StatusOr<std::optional<bool>> OptionalBool(const GgufFile& file, const char* key) {
  if (file.Find(key) == nullptr) return std::optional<bool>();
  MP_ASSIGN_OR_RETURN(bool v, Malformed(file.GetBool(key)));
  return std::optional<bool>(v);
}

}  // namespace

StatusOr<GgufVocab> ReadGgufVocab(const GgufFile& file) {
  GgufVocab v;
  MP_ASSIGN_OR_RETURN(v.model, Malformed(file.GetString("tokenizer.ggml.model")));
  if (file.Find("tokenizer.ggml.pre") != nullptr) {
    MP_ASSIGN_OR_RETURN(v.pre, Malformed(file.GetString("tokenizer.ggml.pre")));
  }
  MP_ASSIGN_OR_RETURN(v.tokens, Malformed(file.GetStringArray("tokenizer.ggml.tokens")));
  if (file.Find("tokenizer.ggml.scores") != nullptr) {
    MP_ASSIGN_OR_RETURN(v.scores, Malformed(file.GetFloatArray("tokenizer.ggml.scores")));
  }
  if (file.Find("tokenizer.ggml.token_type") != nullptr) {
    MP_ASSIGN_OR_RETURN(std::vector<int64_t> types,
                        Malformed(file.GetIntArray("tokenizer.ggml.token_type")));
    v.token_types.reserve(types.size());
    for (int64_t t : types) {
      MP_REQUIRE(t >= 0 && t <= 255, file.path(), ": tokenizer.ggml.token_type holds ", t);
      v.token_types.push_back(static_cast<int32_t>(t));
    }
  }
  if (file.Find("tokenizer.ggml.merges") != nullptr) {
    MP_ASSIGN_OR_RETURN(v.merges, Malformed(file.GetStringArray("tokenizer.ggml.merges")));
  }
  MP_ASSIGN_OR_RETURN(v.bos_id, OptionalId(file, "tokenizer.ggml.bos_token_id"));
  MP_ASSIGN_OR_RETURN(v.eos_id, OptionalId(file, "tokenizer.ggml.eos_token_id"));
  MP_ASSIGN_OR_RETURN(v.unk_id, OptionalId(file, "tokenizer.ggml.unknown_token_id"));
  MP_ASSIGN_OR_RETURN(v.pad_id, OptionalId(file, "tokenizer.ggml.padding_token_id"));
  MP_ASSIGN_OR_RETURN(v.add_bos, OptionalBool(file, "tokenizer.ggml.add_bos_token"));
  MP_ASSIGN_OR_RETURN(v.add_eos, OptionalBool(file, "tokenizer.ggml.add_eos_token"));
  MP_ASSIGN_OR_RETURN(v.add_space_prefix, OptionalBool(file, "tokenizer.ggml.add_space_prefix"));
  return v;
}

StatusOr<std::unique_ptr<Tokenizer>> LoadModelTokenizer(const std::string& path) {
  if (!IsGgufFile(path)) {
    std::error_code ec;
    MP_REQUIRE(std::filesystem::is_directory(path, ec), path,
               std::filesystem::exists(path, ec)
                   ? " is a file but not a GGUF file (it does not start with \"GGUF\"); a model is "
                     "a GGUF file or a Hugging Face directory"
                   : ": no such file or directory");
    const std::string json = JoinPath(path, "tokenizer.json");
    if (!FileExists(json)) return NotFoundError(path + " has no tokenizer.json");
    return Tokenizer::FromFile(json);
  }
  MP_ASSIGN_OR_RETURN(GgufFile file, GgufFile::Open(path));
  if (file.Find("tokenizer.ggml.model") == nullptr)
    return NotFoundError(path + " has no tokenizer (no tokenizer.ggml.model)");
  MP_ASSIGN_OR_RETURN(GgufVocab vocab, ReadGgufVocab(file));
  return TokenizerFromGgufVocab(vocab, path);
}

StatusOr<GgufChatTemplate> ReadGgufChatTemplate(const GgufFile& file) {
  GgufChatTemplate out;
  if (file.Find("tokenizer.chat_template") != nullptr) {
    MP_ASSIGN_OR_RETURN(std::string text, Malformed(file.GetString("tokenizer.chat_template")));
    out.text = std::move(text);
  }
  if (file.Find("tokenizer.ggml.tokens") == nullptr) return out;
  MP_ASSIGN_OR_RETURN(std::vector<std::string> tokens,
                      Malformed(file.GetStringArray("tokenizer.ggml.tokens")));
  const std::pair<const char*, const char*> kSpecial[] = {
      {"bos_token", "tokenizer.ggml.bos_token_id"},
      {"eos_token", "tokenizer.ggml.eos_token_id"},
      {"unk_token", "tokenizer.ggml.unknown_token_id"},
      {"pad_token", "tokenizer.ggml.padding_token_id"}};
  for (const auto& [name, key] : kSpecial) {
    MP_ASSIGN_OR_RETURN(std::optional<int32_t> id, OptionalId(file, key));
    if (!id) continue;
    MP_REQUIRE(static_cast<size_t>(*id) < tokens.size(), file.path(), ": ", key, " ", *id,
               " is outside the vocabulary of ", tokens.size());
    out.special_tokens[name] = tokens[static_cast<size_t>(*id)];
  }
  return out;
}

}  // namespace millipede
