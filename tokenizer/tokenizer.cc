#include "tokenizer/tokenizer.h"

#include <charconv>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <unordered_map>

#include "common/file_util.h"
#include "common/json_util.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/utf8.h"

namespace millipede {

using tokenizer_internal::AddedToken;
using tokenizer_internal::AddedVocabulary;
using tokenizer_internal::BpeModel;
using tokenizer_internal::Decoder;
using tokenizer_internal::Normalizer;
using tokenizer_internal::PreTokenizer;
using tokenizer_internal::Segment;

namespace {

// Pieces longer than this are rare and unlikely to repeat, so they bypass the per-call cache.
constexpr size_t kMaxCachedPieceBytes = 256;

const Json& FieldOrNull(const Json& obj, const char* key) {
  static const Json kNull;
  return obj.contains(key) ? obj[key] : kNull;
}

// The id a TemplateProcessing puts before the text, searched through Sequence processors too.
StatusOr<std::optional<int32_t>> FindBosId(const Json& pp, const Tokenizer& tokenizer,
                                           const std::string& what, int depth) {
  if (!pp.is_object() || depth > 16) return std::optional<int32_t>();
  MP_ASSIGN_OR_RETURN(std::string type, JsonGetStringOr(pp, "type", "", what));
  if (type == "Sequence" && pp.contains("processors") && pp["processors"].is_array()) {
    for (const Json& inner : pp["processors"]) {
      MP_ASSIGN_OR_RETURN(std::optional<int32_t> id, FindBosId(inner, tokenizer, what, depth + 1));
      if (id) return id;
    }
    return std::optional<int32_t>();
  }
  if (type != "TemplateProcessing" || !pp.contains("single") || !pp["single"].is_array()) {
    return std::optional<int32_t>();
  }
  for (const Json& piece : pp["single"]) {
    if (!piece.is_object() || piece.contains("Sequence")) break;  // reached the text itself
    if (!piece.contains("SpecialToken")) continue;
    MP_ASSIGN_OR_RETURN(std::string name, JsonGetString(piece["SpecialToken"], "id", what));
    const Json& specials = FieldOrNull(pp, "special_tokens");
    const Json& entry = FieldOrNull(specials, name.c_str());
    const Json& ids = FieldOrNull(entry, "ids");
    std::optional<int32_t> id = tokenizer.TokenToId(name);
    if (ids.is_array() && !ids.empty() && ids[0].is_number_integer()) {
      int64_t listed = ids[0].get<int64_t>();
      MP_REQUIRE(listed >= 0 && listed < tokenizer.vocab_size(), what, ": template token \"", name,
                 "\" has id ", listed, ", outside the vocabulary");
      id = static_cast<int32_t>(listed);
    }
    MP_REQUIRE(id.has_value(), what, ": template token \"", name, "\" has no id");
    return id;
  }
  return std::optional<int32_t>();
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromFile(const std::string& path) {
  MP_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return FromJson(text, path);
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view json_text,
                                                         const std::string& what) {
  MP_ASSIGN_OR_RETURN(tokenizer_internal::ParsedTokenizerJson parsed,
                      tokenizer_internal::ParseTokenizerJson(json_text, what));
  return FromParsedJson(std::move(parsed), what);
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromParsedJson(
    tokenizer_internal::ParsedTokenizerJson parsed, const std::string& what) {
  const Json& json = parsed.json;
  MP_REQUIRE(json.is_object(), what, ": a tokenizer.json must be a JSON object");
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  try {
    MP_ASSIGN_OR_RETURN(t->normalizer_, Normalizer::FromJson(FieldOrNull(json, "normalizer"),
                                                             what + ": normalizer"));
    MP_ASSIGN_OR_RETURN(
        t->pre_tokenizer_,
        PreTokenizer::FromJson(FieldOrNull(json, "pre_tokenizer"), what + ": pre_tokenizer"));
    MP_REQUIRE(json.contains("model"), what, ": missing \"model\"");
    MP_ASSIGN_OR_RETURN(
        t->model_, BpeModel::FromJson(json["model"], std::move(parsed.tables), what + ": model"));
    MP_ASSIGN_OR_RETURN(t->added_,
                        AddedVocabulary::FromJson(FieldOrNull(json, "added_tokens"), *t->model_,
                                                  t->normalizer_.get(), what + ": added_tokens"));
    MP_ASSIGN_OR_RETURN(t->decoder_,
                        Decoder::FromJson(FieldOrNull(json, "decoder"), what + ": decoder"));
    MP_ASSIGN_OR_RETURN(t->bos_id_, FindBosId(FieldOrNull(json, "post_processor"), *t,
                                              what + ": post_processor", 0));
  } catch (const std::exception& e) {
    // Our parsers check types before access, so this is a gap in those checks, not bad input.
    return InternalError(what + ": unexpected JSON access error: " + e.what());
  }
  return t;
}

StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text) const {
  size_t bad = tokenizer_internal::FindInvalidUtf8(text);
  if (bad != std::string_view::npos) {
    char byte[8];
    std::snprintf(byte, sizeof(byte), "0x%02X", static_cast<unsigned char>(text[bad]));
    return InvalidArgumentError(std::string("Encode: input is not valid UTF-8 (byte ") + byte +
                                " at byte offset " + std::to_string(bad) + ")");
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 16);
  // Per call rather than per tokenizer: no locking, and typical texts repeat their words.
  PieceCache cache;
  std::vector<Segment> raw_segments;
  added_->raw_matcher().Split(text, &raw_segments);
  for (const Segment& raw : raw_segments) {
    if (raw.token_id >= 0) {
      ids.push_back(raw.token_id);
      continue;
    }
    std::string_view part = text.substr(raw.begin, raw.end - raw.begin);
    const bool at_start = raw.begin == 0;
    if (normalizer_ == nullptr) {
      MP_RETURN_IF_ERROR(EncodeNormalized(part, at_start, &cache, &ids));
      continue;
    }
    MP_ASSIGN_OR_RETURN(std::string normalized, normalizer_->Normalize(part));
    MP_RETURN_IF_ERROR(EncodeNormalized(normalized, at_start, &cache, &ids));
  }
  return ids;
}

Status Tokenizer::EncodeNormalized(std::string_view text, bool at_start, PieceCache* cache,
                                   std::vector<int32_t>* ids) const {
  std::vector<Segment> segments;
  added_->normalized_matcher().Split(text, &segments);
  std::vector<std::string> pieces;
  for (const Segment& segment : segments) {
    if (segment.token_id >= 0) {
      ids->push_back(segment.token_id);
      continue;
    }
    std::string_view part = text.substr(segment.begin, segment.end - segment.begin);
    pieces.clear();
    if (pre_tokenizer_ != nullptr) {
      MP_RETURN_IF_ERROR(pre_tokenizer_->Split(part, &pieces, at_start && segment.begin == 0));
    } else {
      pieces.emplace_back(part);
    }
    for (const std::string& piece : pieces) {
      if (piece.size() > kMaxCachedPieceBytes) {
        model_->Tokenize(piece, ids);
        continue;
      }
      auto [it, inserted] = cache->try_emplace(piece);
      if (inserted) model_->Tokenize(piece, &it->second);
      ids->insert(ids->end(), it->second.begin(), it->second.end());
    }
  }
  return OkStatus();
}

StatusOr<std::optional<std::string_view>> Tokenizer::DecodedToken(
    int32_t id, bool skip_special_tokens) const {
  if (const AddedToken* added = added_->FindById(id)) {
    if (skip_special_tokens && added->special) return std::optional<std::string_view>();
    return std::optional<std::string_view>(added->content);
  }
  if (std::optional<std::string_view> from_vocab = model_->IdToToken(id)) return from_vocab;
  if (id < 0) return InvalidArgumentError("invalid token id " + std::to_string(id));
  // Models often have more embedding rows than the tokenizer has tokens (padded vocabularies);
  // like Hugging Face, ids the tokenizer does not know decode to nothing.
  return std::optional<std::string_view>();
}

StatusOr<std::string> Tokenizer::Decode(const std::vector<int32_t>& ids,
                                        bool skip_special_tokens) const {
  std::string bytes;
  tokenizer_internal::DecodeState state = decoder_->NewState();
  for (int32_t id : ids) {
    MP_ASSIGN_OR_RETURN(std::optional<std::string_view> token,
                        DecodedToken(id, skip_special_tokens));
    if (token) decoder_->Push(*token, &state, &bytes);
  }
  decoder_->Finish(&state, &bytes);
  std::string text;
  text.reserve(bytes.size());
  tokenizer_internal::AppendUtf8Lossy(bytes, /*final=*/true, &text);
  return text;
}

int32_t Tokenizer::vocab_size() const { return std::max(model_->max_id(), added_->max_id()) + 1; }

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  if (std::optional<int32_t> id = added_->FindByContent(token)) return id;
  return model_->TokenToId(token);
}

StatusOr<std::string> Tokenizer::IdToToken(int32_t id) const {
  if (const AddedToken* added = added_->FindById(id)) return added->content;
  if (std::optional<std::string_view> token = model_->IdToToken(id)) return std::string(*token);
  return NotFoundError("unknown token id " + std::to_string(id));
}

bool Tokenizer::IsSpecial(int32_t id) const {
  const AddedToken* added = added_->FindById(id);
  return added != nullptr && added->special;
}

StatusOr<std::vector<int32_t>> ParseTokenIds(const std::string& text) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (true) {
    pos = text.find_first_not_of(" \t\r\n\f\v", pos);
    if (pos == std::string::npos) break;
    size_t end = text.find_first_of(" \t\r\n\f\v", pos);
    if (end == std::string::npos) end = text.size();
    int32_t id = 0;
    auto [ptr, ec] = std::from_chars(text.data() + pos, text.data() + end, id);
    if (ec != std::errc() || ptr != text.data() + end || id < 0) {
      return InvalidArgumentError("\"" + text.substr(pos, std::min<size_t>(end - pos, 40)) +
                                  "\" is not a token id");
    }
    ids.push_back(id);
    pos = end;
  }
  return ids;
}

StatusOr<std::vector<int32_t>> EncodePrompt(const Tokenizer& tokenizer, std::string_view text,
                                            bool add_bos) {
  MP_ASSIGN_OR_RETURN(std::vector<int32_t> text_ids, tokenizer.Encode(text));
  if (!add_bos || !tokenizer.bos_id()) return text_ids;
  std::vector<int32_t> ids;
  ids.reserve(text_ids.size() + 1);
  ids.push_back(*tokenizer.bos_id());
  ids.insert(ids.end(), text_ids.begin(), text_ids.end());
  return ids;
}

}  // namespace millipede
