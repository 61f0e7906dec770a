// gguf_vocab_tool: the GGUF-vocabulary tokenizer (tokenizer/gguf_vocab.h) behind JSON lines, for
// gguf_vocab_test.py to compare with its oracles.
//
//   gguf_vocab_tool --vocab VOCAB_JSON [--decode [--skip-special]] [--info]
//   gguf_vocab_tool --tokenizer-json TOKENIZER_JSON [--decode [--skip-special]] [--info]
//
// VOCAB_JSON is a GgufVocab as one JSON object: "model", "pre", "tokens", "scores",
// "token_types", "merges", "bos_id", "eos_id", "unk_id", "pad_id", "add_bos", "add_eos",
// "add_space_prefix", each optional as in the GGUF file. Encoding reads one JSON string per
// stdin line and prints the JSON array of its ids; --decode reads JSON arrays of ids and prints
// JSON strings, decoding each array both at once and through a StreamingDecoder one id at a
// time (a difference is an error). --info prints {"bos_id": ..., "vocab_size": ...} and exits.
// Exit status: 0 on success, 1 on bad input or a refused vocabulary, 2 on bad usage.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "common/json_util.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/tokenizer.h"

namespace millipede {
namespace {

constexpr char kUsage[] =
    "usage: gguf_vocab_tool (--vocab VOCAB_JSON | --tokenizer-json PATH) [--decode "
    "[--skip-special]] [--info]\n";

int Fail(const std::string& message) {
  std::fprintf(stderr, "gguf_vocab_tool: %s\n", message.c_str());
  return 1;
}

template <typename T>
Status GetOptional(const Json& json, const char* key, std::optional<T>* out) {
  if (!json.contains(key) || json[key].is_null()) return OkStatus();
  try {
    *out = json[key].get<T>();
  } catch (const std::exception& e) {
    return InvalidArgumentError(std::string("vocab: bad \"") + key + "\": " + e.what());
  }
  return OkStatus();
}

template <typename T>
Status GetValue(const Json& json, const char* key, T* out) {
  std::optional<T> value;
  MP_RETURN_IF_ERROR(GetOptional(json, key, &value));
  if (value) *out = std::move(*value);
  return OkStatus();
}

StatusOr<GgufVocab> ReadVocab(const std::string& path) {
  MP_ASSIGN_OR_RETURN(Json json, ParseJsonFile(path));
  MP_REQUIRE(json.is_object(), path, ": expected a JSON object");
  GgufVocab vocab;
  MP_RETURN_IF_ERROR(GetValue(json, "model", &vocab.model));
  MP_RETURN_IF_ERROR(GetValue(json, "pre", &vocab.pre));
  MP_RETURN_IF_ERROR(GetValue(json, "tokens", &vocab.tokens));
  MP_RETURN_IF_ERROR(GetValue(json, "scores", &vocab.scores));
  MP_RETURN_IF_ERROR(GetValue(json, "token_types", &vocab.token_types));
  MP_RETURN_IF_ERROR(GetValue(json, "merges", &vocab.merges));
  MP_RETURN_IF_ERROR(GetOptional(json, "bos_id", &vocab.bos_id));
  MP_RETURN_IF_ERROR(GetOptional(json, "eos_id", &vocab.eos_id));
  MP_RETURN_IF_ERROR(GetOptional(json, "unk_id", &vocab.unk_id));
  MP_RETURN_IF_ERROR(GetOptional(json, "pad_id", &vocab.pad_id));
  MP_RETURN_IF_ERROR(GetOptional(json, "add_bos", &vocab.add_bos));
  MP_RETURN_IF_ERROR(GetOptional(json, "add_eos", &vocab.add_eos));
  MP_RETURN_IF_ERROR(GetOptional(json, "add_space_prefix", &vocab.add_space_prefix));
  return vocab;
}

StatusOr<std::string> ProcessLine(const Tokenizer& tokenizer, const std::string& line, bool decode,
                                  bool skip_special) {
  MP_ASSIGN_OR_RETURN(Json json, ParseJson(line, "input"));
  if (!decode) {
    MP_REQUIRE(json.is_string(), "expected a JSON string, got ", json.type_name());
    MP_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenizer.Encode(json.get<std::string>()));
    return Json(ids).dump();
  }
  MP_REQUIRE(json.is_array(), "expected a JSON array of ids, got ", json.type_name());
  std::vector<int32_t> ids;
  for (const Json& item : json) {
    MP_REQUIRE(item.is_number_integer(), "ids must be integers, got ", item.dump());
    ids.push_back(item.get<int32_t>());
  }
  MP_ASSIGN_OR_RETURN(std::string text, tokenizer.Decode(ids, skip_special));
  StreamingDecoder stream(tokenizer, skip_special);
  std::string streamed;
  for (int32_t id : ids) {
    MP_ASSIGN_OR_RETURN(std::string chunk, stream.Push(id));
    streamed += chunk;
  }
  streamed += stream.Finish();
  MP_REQUIRE(streamed == text, "streaming decode ", Json(streamed).dump(),
             " differs from Decode ", Json(text).dump());
  return Json(text).dump(-1, ' ', false, Json::error_handler_t::strict);
}

int Run(int argc, char** argv) {
  std::string vocab_path;
  std::string json_path;
  bool decode = false;
  bool skip_special = false;
  bool info = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if ((arg == "--vocab" || arg == "--tokenizer-json") && i + 1 < argc) {
      (arg == "--vocab" ? vocab_path : json_path) = argv[++i];
    } else if (arg == "--decode") {
      decode = true;
    } else if (arg == "--skip-special") {
      skip_special = true;
    } else if (arg == "--info") {
      info = true;
    } else {
      std::fprintf(stderr, "gguf_vocab_tool: unexpected argument %s\n%s", arg.c_str(), kUsage);
      return 2;
    }
  }
  if (vocab_path.empty() == json_path.empty()) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  StatusOr<std::unique_ptr<Tokenizer>> tokenizer = [&]() -> StatusOr<std::unique_ptr<Tokenizer>> {
    if (!json_path.empty()) return Tokenizer::FromFile(json_path);
    MP_ASSIGN_OR_RETURN(GgufVocab vocab, ReadVocab(vocab_path));
    return TokenizerFromGgufVocab(vocab, vocab_path);
  }();
  if (!tokenizer.ok()) return Fail(tokenizer.status().ToString());
  if (info) {
    Json out = {{"vocab_size", (*tokenizer)->vocab_size()}, {"bos_id", nullptr}};
    if ((*tokenizer)->bos_id()) out["bos_id"] = *(*tokenizer)->bos_id();
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::string line;
  for (size_t line_no = 1; std::getline(std::cin, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    StatusOr<std::string> out = ProcessLine(**tokenizer, line, decode, skip_special);
    if (!out.ok()) return Fail("line " + std::to_string(line_no) + ": " + out.status().ToString());
    std::fwrite(out->data(), 1, out->size(), stdout);
    std::fputc('\n', stdout);
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace millipede

int main(int argc, char** argv) {
  try {
    return millipede::Run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gguf_vocab_tool: internal error: %s\n", e.what());
    return 1;
  }
}
