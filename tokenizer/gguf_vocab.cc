#include "tokenizer/gguf_vocab.h"

#include <algorithm>
#include <cmath>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "common/json_util.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/utf8.h"

namespace millipede {
namespace {

using tokenizer_internal::ParsedTokenizerJson;
using tokenizer_internal::RawMerge;

// Ids index dense tables; the BPE model accepts ids below 2^24.
constexpr size_t kMaxTokens = size_t{1} << 24;

enum class RegexFamily { kGpt2, kLlama3, kQwen2, kDigitsThenGpt2 };

struct PreTokenizerName {
  const char* name;
  RegexFamily family;
  bool ignore_merges;  // llama.cpp's tokenizer_ignore_merges for the name
  bool add_bos;        // llama.cpp's add_bos default for the name
};

// The names llama.cpp gives each of these regex lists (src/llama-vocab.cpp).
constexpr PreTokenizerName kPreTokenizers[] = {
    {"gpt-2", RegexFamily::kGpt2, false, false},
    {"phi-2", RegexFamily::kGpt2, false, false},
    {"mpt", RegexFamily::kGpt2, false, false},
    {"olmo", RegexFamily::kGpt2, false, false},
    {"llama-bpe", RegexFamily::kLlama3, true, true},
    {"llama3", RegexFamily::kLlama3, true, true},
    {"llama-v3", RegexFamily::kLlama3, true, true},
    {"falcon3", RegexFamily::kLlama3, true, true},
    {"pixtral", RegexFamily::kLlama3, true, true},
    {"dbrx", RegexFamily::kLlama3, false, false},
    {"smaug-bpe", RegexFamily::kLlama3, false, false},
    {"qwen2", RegexFamily::kQwen2, false, false},
    {"deepseek-r1-qwen", RegexFamily::kQwen2, false, false},
    {"stablelm2", RegexFamily::kQwen2, false, false},
    {"smollm", RegexFamily::kDigitsThenGpt2, false, false},
    {"starcoder", RegexFamily::kDigitsThenGpt2, false, false},
    {"refact", RegexFamily::kDigitsThenGpt2, false, false},
    {"command-r", RegexFamily::kDigitsThenGpt2, false, false},
    {"codeshell", RegexFamily::kDigitsThenGpt2, false, false},
    {"exaone", RegexFamily::kDigitsThenGpt2, false, false},
    {"minerva-7b", RegexFamily::kDigitsThenGpt2, false, false},
};

// llama.cpp's regexes for the Llama 3 and Qwen2 families. They spell the contractions with
// character classes where the tokenizer.json originals say (?i:'s|...), so that no Unicode case
// folding (the long s U+017F matches "s" caselessly) joins an apostrophe to a letter.
const char kLlama3Regex[] =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|)"
    R"(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char kQwen2Regex[] =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|)"
    R"(\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// What an absent tokenizer.ggml.pre means here (see gguf_vocab.h).
constexpr PreTokenizerName kNoPreTokenizerName = {"", RegexFamily::kGpt2, false, false};

std::string SupportedPreNames() {
  std::string names;
  for (const PreTokenizerName& p : kPreTokenizers) {
    if (!names.empty()) names += ", ";
    names += p.name;
  }
  return names;
}

Json SplitIsolated(const std::string& regex) {
  return Json{{"type", "Split"},
              {"pattern", {{"Regex", regex}}},
              {"behavior", "Isolated"},
              {"invert", false}};
}

Json ByteLevelJson(bool use_regex) {
  return Json{{"type", "ByteLevel"},
              {"add_prefix_space", false},
              {"trim_offsets", false},
              {"use_regex", use_regex}};
}

Json PreTokenizerJson(RegexFamily family) {
  switch (family) {
    case RegexFamily::kGpt2:
      // ByteLevel's own regex is GPT-2's. llama.cpp's copy lacks the final "|\s+"; that only
      // matters for a lone whitespace character before a non-space, which llama.cpp keeps as an
      // unmatched piece of its own: the same pieces.
      return ByteLevelJson(true);
    case RegexFamily::kLlama3:
      return Json{{"type", "Sequence"},
                  {"pretokenizers",
                   {SplitIsolated(kLlama3Regex), ByteLevelJson(false)}}};
    case RegexFamily::kQwen2:
      return Json{{"type", "Sequence"},
                  {"pretokenizers",
                   {SplitIsolated(kQwen2Regex), ByteLevelJson(false)}}};
    case RegexFamily::kDigitsThenGpt2:
      return Json{{"type", "Sequence"},
                  {"pretokenizers", {SplitIsolated(R"(\p{N})"), ByteLevelJson(true)}}};
  }
  return Json();
}

Status CheckId(const std::optional<int32_t>& id, const char* key, size_t n_tokens,
               const std::string& what) {
  if (!id) return OkStatus();
  MP_REQUIRE(*id >= 0 && static_cast<size_t>(*id) < n_tokens, what, ": tokenizer.ggml.", key,
             " = ", *id, " is outside the vocabulary [0, ", n_tokens, ")");
  return OkStatus();
}

// The merges transformers' GGUF converter derives from a SentencePiece-style vocabulary: for
// each token in vocabulary order, every split into two vocabulary tokens, ordered by the two
// parts' scores (highest first, stable); then all of them stably sorted by the merged token's
// score, highest first.
std::vector<RawMerge> MergesFromScores(
    const std::vector<std::string>& tokens, const std::vector<float>& scores,
    const std::unordered_map<std::string_view, int32_t>& ids) {
  struct Candidate {
    int32_t left;
    int32_t right;
    int32_t merged;
  };
  auto score = [&](int32_t id) { return scores.empty() ? 0.0f : scores[id]; };
  std::vector<Candidate> all;
  std::vector<Candidate> local;
  for (size_t id = 0; id < tokens.size(); ++id) {
    std::string_view token = tokens[id];
    if (token.empty()) continue;
    local.clear();
    size_t pos = 0;
    while (true) {
      pos += tokenizer_internal::Utf8SequenceLength(static_cast<unsigned char>(token[pos]));
      if (pos >= token.size()) break;
      auto left = ids.find(token.substr(0, pos));
      if (left == ids.end()) continue;
      auto right = ids.find(token.substr(pos));
      if (right == ids.end()) continue;
      local.push_back({left->second, right->second, static_cast<int32_t>(id)});
    }
    std::stable_sort(local.begin(), local.end(), [&](const Candidate& a, const Candidate& b) {
      return std::make_tuple(score(a.left), score(a.right)) >
             std::make_tuple(score(b.left), score(b.right));
    });
    all.insert(all.end(), local.begin(), local.end());
  }
  std::stable_sort(all.begin(), all.end(), [&](const Candidate& a, const Candidate& b) {
    return score(a.merged) > score(b.merged);
  });
  std::vector<RawMerge> merges;
  merges.reserve(all.size());
  for (const Candidate& c : all) {
    RawMerge m;
    m.form = RawMerge::Form::kPair;
    m.first = tokens[c.left];
    m.second = tokens[c.right];
    m.parts = 2;
    merges.push_back(std::move(m));
  }
  return merges;
}

// Splits a gpt2 merge "left right" and checks it against the vocabulary.
Status GptMerge(const std::string& line, size_t index,
                const std::unordered_map<std::string_view, int32_t>& ids,
                const std::string& what, RawMerge* merge) {
  auto where = [&] { return what + ": tokenizer.ggml.merges[" + std::to_string(index) + "]"; };
  size_t space = line.find(' ');
  MP_REQUIRE(space != std::string::npos && space > 0 && space + 1 < line.size() &&
                 line.find(' ', space + 1) == std::string::npos,
             where(), ": \"", line, "\" is not two tokens separated by one space");
  std::string_view left = std::string_view(line).substr(0, space);
  std::string_view right = std::string_view(line).substr(space + 1);
  MP_REQUIRE(ids.count(left), where(), ": \"", left, "\" is not in the vocabulary");
  MP_REQUIRE(ids.count(right), where(), ": \"", right, "\" is not in the vocabulary");
  std::string merged = std::string(left) + std::string(right);
  MP_REQUIRE(ids.count(merged), where(), ": the merged token \"", merged,
             "\" is not in the vocabulary");
  merge->form = RawMerge::Form::kPair;
  merge->first = std::string(left);
  merge->second = std::string(right);
  merge->parts = 2;
  return OkStatus();
}

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromGgufVocab(const GgufVocab& vocab,
                                                            const std::string& what) {
  MP_REQUIRE(!vocab.model.empty(), what, ": tokenizer.ggml.model is missing");
  const bool is_gpt2 = vocab.model == "gpt2";
  if (!is_gpt2 && vocab.model != "llama") {
    return UnimplementedError(what + ": tokenizer.ggml.model \"" + vocab.model +
                              "\" is not supported (supported: gpt2, llama)");
  }
  const size_t n = vocab.tokens.size();
  MP_REQUIRE(n > 0, what, ": tokenizer.ggml.tokens is missing or empty");
  MP_REQUIRE(n <= kMaxTokens, what, ": tokenizer.ggml.tokens has ", n, " tokens, more than ",
             kMaxTokens);
  MP_REQUIRE(vocab.scores.empty() || vocab.scores.size() == n, what, ": tokenizer.ggml.scores has ",
             vocab.scores.size(), " entries for ", n, " tokens");
  MP_REQUIRE(vocab.token_types.empty() || vocab.token_types.size() == n, what,
             ": tokenizer.ggml.token_type has ", vocab.token_types.size(), " entries for ", n,
             " tokens");
  for (size_t i = 0; i < vocab.token_types.size(); ++i) {
    MP_REQUIRE(vocab.token_types[i] >= 0 && vocab.token_types[i] <= 6, what,
               ": tokenizer.ggml.token_type[", i, "] = ", vocab.token_types[i],
               " is not a token type (0..6)");
  }
  for (size_t i = 0; i < vocab.scores.size(); ++i) {
    MP_REQUIRE(!std::isnan(vocab.scores[i]), what, ": tokenizer.ggml.scores[", i, "] is NaN");
  }
  MP_RETURN_IF_ERROR(CheckId(vocab.bos_id, "bos_token_id", n, what));
  MP_RETURN_IF_ERROR(CheckId(vocab.eos_id, "eos_token_id", n, what));
  MP_RETURN_IF_ERROR(CheckId(vocab.unk_id, "unknown_token_id", n, what));
  MP_RETURN_IF_ERROR(CheckId(vocab.pad_id, "padding_token_id", n, what));

  const PreTokenizerName* pre = &kNoPreTokenizerName;
  if (is_gpt2 && !vocab.pre.empty()) {
    pre = nullptr;
    for (const PreTokenizerName& p : kPreTokenizers) {
      if (vocab.pre == p.name) pre = &p;
    }
    if (pre == nullptr) {
      return UnimplementedError(what + ": tokenizer.ggml.pre \"" + vocab.pre +
                                "\" is not supported (supported: " + SupportedPreNames() +
                                "; or none)");
    }
  }

  ParsedTokenizerJson parsed;
  std::unordered_map<std::string_view, int32_t> ids;
  ids.reserve(n * 2);
  parsed.tables.vocab.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string& token = vocab.tokens[i];
    size_t bad = tokenizer_internal::FindInvalidUtf8(token);
    MP_REQUIRE(bad == std::string_view::npos, what, ": tokenizer.ggml.tokens[", i,
               "] is not valid UTF-8 (byte offset ", bad, ")");
    if (token.empty()) continue;  // never produced; its id decodes to nothing
    auto [it, inserted] = ids.emplace(token, static_cast<int32_t>(i));
    MP_REQUIRE(inserted, what, ": tokenizer.ggml.tokens has \"", token, "\" twice (ids ",
               it->second, " and ", i, ")");
    parsed.tables.vocab.push_back({token, static_cast<int64_t>(i), true});
  }
  auto token_text = [&](int32_t id) -> StatusOr<std::string> {
    MP_REQUIRE(!vocab.tokens[id].empty(), what, ": token ", id,
               " is named as a special token but is empty");
    return vocab.tokens[id];
  };

  Json model = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", Json::object()},
                {"merges", Json::array()}};
  Json json = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}};
  if (is_gpt2) {
    MP_REQUIRE(!vocab.merges.empty(), what,
               ": tokenizer.ggml.merges is missing (the gpt2 model needs it)");
    parsed.tables.merges.resize(vocab.merges.size());
    for (size_t i = 0; i < vocab.merges.size(); ++i) {
      MP_RETURN_IF_ERROR(GptMerge(vocab.merges[i], i, ids, what, &parsed.tables.merges[i]));
    }
    model["ignore_merges"] = pre->ignore_merges;
    json["normalizer"] = nullptr;
    json["pre_tokenizer"] = PreTokenizerJson(pre->family);
    json["decoder"] = ByteLevelJson(true);
  } else {
    parsed.tables.merges = MergesFromScores(vocab.tokens, vocab.scores, ids);
    model["byte_fallback"] = true;
    model["fuse_unk"] = true;
    if (vocab.unk_id) {
      MP_ASSIGN_OR_RETURN(std::string unk, token_text(*vocab.unk_id));
      model["unk_token"] = unk;
    }
    const bool prefix = vocab.add_space_prefix.value_or(true);
    Json replace = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}};
    Json normalizers = Json::array();
    if (prefix) normalizers.push_back({{"type", "Prepend"}, {"prepend", "\u2581"}});
    normalizers.push_back(replace);
    json["normalizer"] = {{"type", "Sequence"}, {"normalizers", normalizers}};
    json["pre_tokenizer"] = nullptr;
    Json decoders = {{{"type", "ByteFallback"}},
                     {{"type", "Fuse"}},
                     {{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}}};
    if (prefix) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    json["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
  }
  json["model"] = std::move(model);

  Json added = Json::array();
  for (size_t i = 0; i < vocab.token_types.size(); ++i) {
    auto type = static_cast<GgufTokenType>(vocab.token_types[i]);
    if (type != GgufTokenType::kUnknown && type != GgufTokenType::kControl &&
        type != GgufTokenType::kUserDefined) {
      continue;
    }
    if (vocab.tokens[i].empty()) continue;
    added.push_back({{"id", i},
                     {"content", vocab.tokens[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", type != GgufTokenType::kUserDefined}});
  }
  json["added_tokens"] = std::move(added);

  // BOS (and EOS) through a TemplateProcessing post-processor, which is what bos_id() reads.
  const bool add_bos = vocab.add_bos.value_or(is_gpt2 ? pre->add_bos : true);
  const bool add_eos = vocab.add_eos.value_or(false);
  MP_REQUIRE(!(vocab.add_bos.value_or(false) && !vocab.bos_id), what,
             ": tokenizer.ggml.add_bos_token is true but tokenizer.ggml.bos_token_id is missing");
  MP_REQUIRE(!(add_eos && !vocab.eos_id), what,
             ": tokenizer.ggml.add_eos_token is true but tokenizer.ggml.eos_token_id is missing");
  Json single = Json::array();
  Json specials = Json::object();
  auto add_special = [&](int32_t id) -> StatusOr<Json> {
    MP_ASSIGN_OR_RETURN(std::string text, token_text(id));
    specials[text] = {{"id", text}, {"ids", {id}}, {"tokens", {text}}};
    return Json{{"SpecialToken", {{"id", text}, {"type_id", 0}}}};
  };
  if (add_bos && vocab.bos_id) {
    MP_ASSIGN_OR_RETURN(Json piece, add_special(*vocab.bos_id));
    single.push_back(std::move(piece));
  }
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  if (add_eos) {
    MP_ASSIGN_OR_RETURN(Json piece, add_special(*vocab.eos_id));
    single.push_back(std::move(piece));
  }
  if (single.size() > 1) {
    json["post_processor"] = {{"type", "TemplateProcessing"},
                              {"single", std::move(single)},
                              {"pair", Json::array()},
                              {"special_tokens", std::move(specials)}};
  } else {
    json["post_processor"] = nullptr;
  }

  parsed.json = std::move(json);
  return Tokenizer::FromParsedJson(std::move(parsed), what);
}

}  // namespace millipede
