#include "tokenizer/tokenizer_json.h"

namespace millipede::tokenizer_internal {
namespace {

using Event = Json::parse_event_t;

// Receives nlohmann's parse events. Depths: root members have depth 1, members of "model" 2,
// entries of model.vocab and model.merges 3, strings inside a ["a", "b"] merge 4. Returning
// false drops the element from the document after we have copied it.
class TableExtractor {
 public:
  explicit TableExtractor(RawBpeTables* tables) : tables_(tables) {}

  bool operator()(int depth, Event event, Json& value) {
    if (event == Event::key) return OnKey(depth, value);
    if (keys_[1] != "model") return true;
    if (keys_[2] == "vocab" && depth == 3) return OnVocabValue(event, value);
    if (keys_[2] == "merges" && (depth == 3 || depth == 4)) return OnMerge(depth, event, value);
    return true;
  }

 private:
  bool OnKey(int depth, const Json& key) {
    if (depth < 1 || depth > 3) return true;
    keys_[depth] = key.get<std::string>();
    for (int d = depth + 1; d <= 3; ++d) keys_[d].clear();
    if (depth == 3 && keys_[1] == "model" && keys_[2] == "vocab") {
      tables_->vocab.push_back({keys_[3], -1, false});
      awaiting_vocab_value_ = true;
      return false;
    }
    return true;
  }

  bool OnVocabValue(Event event, const Json& value) {
    if (!awaiting_vocab_value_) return true;  // vocab is not an object: left for the checks
    awaiting_vocab_value_ = false;
    if (event == Event::value && value.is_number_integer()) {
      tables_->vocab.back().id = value.get<int64_t>();
      tables_->vocab.back().is_integer = true;
    }
    return false;
  }

  bool OnMerge(int depth, Event event, const Json& value) {
    if (depth == 3) {
      switch (event) {
        case Event::value:
          tables_->merges.push_back({});
          if (value.is_string()) {
            tables_->merges.back().form = RawMerge::Form::kLine;
            tables_->merges.back().first = value.get<std::string>();
          }
          return false;
        case Event::array_start:
          tables_->merges.push_back({});
          tables_->merges.back().form = RawMerge::Form::kPair;
          return true;  // its strings arrive as depth-4 events
        case Event::array_end:
          return false;
        case Event::object_start:
          tables_->merges.push_back({});
          return false;
        default:
          return true;
      }
    }
    if (tables_->merges.empty() || tables_->merges.back().form != RawMerge::Form::kPair) {
      return false;
    }
    RawMerge& merge = tables_->merges.back();
    if (event != Event::value || !value.is_string() || merge.parts >= 2) {
      merge.form = RawMerge::Form::kMalformed;
      return false;
    }
    (merge.parts == 0 ? merge.first : merge.second) = value.get<std::string>();
    ++merge.parts;
    return false;
  }

  RawBpeTables* tables_;
  std::string keys_[4];  // the member key being parsed at depths 1..3
  bool awaiting_vocab_value_ = false;
};

}  // namespace

StatusOr<ParsedTokenizerJson> ParseTokenizerJson(std::string_view text, const std::string& what) {
  ParsedTokenizerJson parsed;
  TableExtractor extractor(&parsed.tables);
  try {
    parsed.json = Json::parse(
        text.begin(), text.end(),
        [&extractor](int depth, Event event, Json& value) {
          return extractor(depth, event, value);
        },
        /*allow_exceptions=*/false);
  } catch (const std::exception& e) {
    return InternalError(what + ": JSON parser failed: " + e.what());
  }
  if (parsed.json.is_discarded()) {
    // Parse again the plain way, only to get the position of the error into the message.
    MP_RETURN_IF_ERROR(ParseJson(text, what).status());
    return InvalidArgumentError(what + ": invalid JSON");
  }
  return parsed;
}

}  // namespace millipede::tokenizer_internal
