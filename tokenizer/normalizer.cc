#include "tokenizer/normalizer.h"

#include <utility>

#include "tokenizer/normalizer_nfc.h"
#include "tokenizer/regex.h"

namespace millipede::tokenizer_internal {

struct Normalizer::Step {
  enum class Kind { kNfc, kPrepend, kReplace };
  Kind kind = Kind::kNfc;
  std::string text;              // Prepend: what is prepended; Replace: the String pattern
  std::unique_ptr<Regex> regex;  // Replace: the Regex pattern (null for a String one)
  std::string content;           // Replace: what replaces each match
};

Normalizer::Normalizer() = default;
Normalizer::~Normalizer() = default;

Status Normalizer::CollectSteps(const Json& json, const std::string& what, int depth,
                                std::vector<Step>* steps) {
  MP_REQUIRE(depth < 16, what, ": normalizers nested too deeply");
  MP_REQUIRE(json.is_object(), what, ": expected an object, got ", json.type_name());
  MP_ASSIGN_OR_RETURN(std::string type, JsonGetString(json, "type", what));
  Step step;
  if (type == "NFC") {
    step.kind = Step::Kind::kNfc;
  } else if (type == "Prepend") {
    step.kind = Step::Kind::kPrepend;
    MP_ASSIGN_OR_RETURN(step.text, JsonGetString(json, "prepend", what));
  } else if (type == "Replace") {
    step.kind = Step::Kind::kReplace;
    MP_REQUIRE(json.contains("pattern") && json["pattern"].is_object(), what,
               ": Replace needs a \"pattern\" object ({\"String\": ...} or {\"Regex\": ...})");
    const Json& pattern = json["pattern"];
    if (pattern.contains("Regex")) {
      MP_ASSIGN_OR_RETURN(std::string regex, JsonGetString(pattern, "Regex", what + ".pattern"));
      MP_ASSIGN_OR_RETURN(step.regex, Regex::Compile(regex, what + ".pattern"));
    } else {
      MP_ASSIGN_OR_RETURN(step.text, JsonGetString(pattern, "String", what + ".pattern"));
    }
    MP_ASSIGN_OR_RETURN(step.content, JsonGetString(json, "content", what));
  } else if (type == "Sequence") {
    MP_REQUIRE(json.contains("normalizers") && json["normalizers"].is_array(), what,
               ": Sequence needs a \"normalizers\" array");
    const Json& items = json["normalizers"];
    for (size_t i = 0; i < items.size(); ++i) {
      MP_RETURN_IF_ERROR(CollectSteps(items[i], what + ".normalizers[" + std::to_string(i) + "]",
                                      depth + 1, steps));
    }
    return OkStatus();
  } else {
    return UnimplementedError(what + ": unsupported normalizer type \"" + type +
                              "\" (supported: NFC, Prepend, Replace, Sequence)");
  }
  steps->push_back(std::move(step));
  return OkStatus();
}

StatusOr<std::unique_ptr<Normalizer>> Normalizer::FromJson(const Json& json,
                                                           const std::string& what) {
  if (json.is_null()) return std::unique_ptr<Normalizer>();
  std::unique_ptr<Normalizer> normalizer(new Normalizer());
  MP_RETURN_IF_ERROR(CollectSteps(json, what, 0, &normalizer->steps_));
  return normalizer;
}

StatusOr<std::string> Normalizer::Normalize(std::string_view text) const {
  std::string current(text);
  std::vector<std::pair<size_t, size_t>> matches;
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Step::Kind::kNfc:
        current = NfcNormalize(current);
        break;
      case Step::Kind::kPrepend:
        // HF leaves an empty string empty.
        if (!current.empty()) current.insert(0, step.text);
        break;
      case Step::Kind::kReplace: {
        matches.clear();
        if (step.regex != nullptr) {
          MP_RETURN_IF_ERROR(step.regex->FindAll(current, &matches));
        } else if (!step.text.empty()) {
          for (size_t pos = current.find(step.text); pos != std::string::npos;
               pos = current.find(step.text, pos + step.text.size())) {
            matches.emplace_back(pos, pos + step.text.size());
          }
        }
        if (matches.empty()) break;
        std::string replaced;
        replaced.reserve(current.size() + matches.size() * step.content.size());
        size_t prev = 0;
        for (const auto& [begin, end] : matches) {
          replaced.append(current, prev, begin - prev);
          replaced.append(step.content);
          prev = end;
        }
        replaced.append(current, prev, std::string::npos);
        current = std::move(replaced);
        break;
      }
    }
  }
  return current;
}

}  // namespace millipede::tokenizer_internal
