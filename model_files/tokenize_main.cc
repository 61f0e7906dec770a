// millipede-tokenize: encode stdin text to ids, or decode ids to text, with a tokenizer.json
// or the tokenizer of a model path (a Hugging Face directory's tokenizer.json, or a GGUF file's
// vocabulary: LoadModelTokenizer).
//
//   millipede-tokenize TOKENIZER                  stdin text -> space-separated ids (one line)
//   millipede-tokenize TOKENIZER --decode         stdin whitespace-separated ids -> text
//   ... --jsonl                                   one JSON string per line -> one JSON array of
//                                                 ids per line (with --decode: the reverse)
//
// Encoding adds no BOS (Tokenizer::Encode, as `tokenizers`' encode without special tokens);
// added tokens written in the text (such as a chat template's markers) become their ids.
// Blank input lines in --jsonl mode are skipped. Exit status: 0 on success, 1 on bad input or a
// bad tokenizer file, 2 on bad usage.
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "checkpoint/gguf_model.h"
#include "common/json_util.h"
#include "model_files/model_files.h"
#include "tokenizer/tokenizer.h"

namespace millipede {
namespace {

constexpr char kUsage[] =
    "usage: millipede-tokenize TOKENIZER [--decode] [--jsonl]\n"
    "  TOKENIZER: a tokenizer.json, a model directory (its tokenizer.json) or a GGUF file\n"
    "  encode: stdin text -> space-separated ids on one line\n"
    "  --decode: stdin whitespace-separated ids -> text\n"
    "  --jsonl: each input line is a JSON string (with --decode: a JSON array of ids); each\n"
    "           output line is a JSON array of ids (with --decode: a JSON string)\n";

int Fail(const std::string& message) {
  std::fprintf(stderr, "millipede-tokenize: %s\n", message.c_str());
  return 1;
}

void Write(const std::string& text) { std::fwrite(text.data(), 1, text.size(), stdout); }

std::string JoinIds(const std::vector<int32_t>& ids, const char* separator) {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += separator;
    out += std::to_string(ids[i]);
  }
  return out;
}


StatusOr<std::vector<int32_t>> IdsFromJson(const Json& json) {
  MP_REQUIRE(json.is_array(), "expected a JSON array of ids, got ", json.type_name());
  std::vector<int32_t> ids;
  ids.reserve(json.size());
  for (const Json& item : json) {
    MP_REQUIRE(item.is_number_integer(), "ids must be integers, got ", item.dump());
    int64_t id = item.get<int64_t>();
    MP_REQUIRE(id >= INT32_MIN && id <= INT32_MAX, "id ", id, " is out of range");
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

// Handles one --jsonl line, returning the output line without its newline.
StatusOr<std::string> ProcessJsonLine(const Tokenizer& tokenizer, const std::string& line,
                                      bool decode) {
  MP_ASSIGN_OR_RETURN(Json json, ParseJson(line, "input"));
  if (decode) {
    MP_ASSIGN_OR_RETURN(std::vector<int32_t> ids, IdsFromJson(json));
    MP_ASSIGN_OR_RETURN(std::string text, tokenizer.Decode(ids));
    return Json(text).dump();
  }
  MP_REQUIRE(json.is_string(), "expected a JSON string, got ", json.type_name());
  MP_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenizer.Encode(json.get<std::string>()));
  std::string out = "[";
  out += JoinIds(ids, ",");
  out += "]";
  return out;
}

int Run(int argc, char** argv) {
  std::string path;
  bool decode = false;
  bool jsonl = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--decode") {
      decode = true;
    } else if (arg == "--jsonl") {
      jsonl = true;
    } else if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (!arg.empty() && arg[0] == '-') {
      std::fprintf(stderr, "millipede-tokenize: unknown flag %s\n%s", arg.c_str(), kUsage);
      return 2;
    } else if (path.empty()) {
      path = arg;
    } else {
      std::fprintf(stderr, "millipede-tokenize: more than one tokenizer path\n%s", kUsage);
      return 2;
    }
  }
  if (path.empty()) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  // A model path (a directory or a GGUF file) goes through model_files/; anything else is a
  // tokenizer.json.
  std::error_code error;
  auto tokenizer = std::filesystem::is_directory(path, error) || IsGgufFile(path)
                       ? LoadModelTokenizer(path)
                       : Tokenizer::FromFile(path);
  if (!tokenizer.ok()) return Fail(tokenizer.status().ToString());

  if (jsonl) {
    std::string line;
    for (size_t line_no = 1; std::getline(std::cin, line); ++line_no) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      StatusOr<std::string> out = ProcessJsonLine(**tokenizer, line, decode);
      if (!out.ok())
        return Fail("line " + std::to_string(line_no) + ": " + out.status().ToString());
      Write(*out + "\n");
    }
    std::fflush(stdout);
    return 0;
  }
  std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  if (decode) {
    StatusOr<std::vector<int32_t>> ids = ParseTokenIds(input);
    if (!ids.ok()) return Fail(ids.status().ToString());
    StatusOr<std::string> text = (*tokenizer)->Decode(*ids);
    if (!text.ok()) return Fail(text.status().ToString());
    Write(*text);
  } else {
    StatusOr<std::vector<int32_t>> ids = (*tokenizer)->Encode(input);
    if (!ids.ok()) return Fail(ids.status().ToString());
    Write(JoinIds(*ids, " ") + "\n");
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
    // Only allocation failure or a library bug gets here; report it instead of aborting.
    std::fprintf(stderr, "millipede-tokenize: internal error: %s\n", e.what());
    return 1;
  }
}
