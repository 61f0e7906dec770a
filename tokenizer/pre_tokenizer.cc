#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <utility>

#include "tokenizer/byte_level.h"

namespace millipede::tokenizer_internal {

const char kGpt2SplitPattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char kLlama3SplitPattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|)"
    R"(\s*[\r\n]+|\s+(?!\S)|\s+)";

struct PreTokenizer::Step {
  enum class Kind { kSplit, kByteLevel };
  Kind kind = Kind::kSplit;
  std::unique_ptr<Regex> regex;  // Split's Regex pattern, or ByteLevel's use_regex
  std::string literal;           // Split's String pattern (when regex is null)
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;
};

namespace {

struct Part {
  size_t begin;
  size_t end;
  bool match;
};

StatusOr<SplitBehavior> ParseBehavior(const std::string& name, const std::string& what) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  return InvalidArgumentError(what + ": unknown split behavior \"" + name + "\"");
}

void FindLiteral(std::string_view text, std::string_view literal,
                 std::vector<std::pair<size_t, size_t>>* matches) {
  if (literal.empty()) return;
  for (size_t pos = text.find(literal); pos != std::string_view::npos;
       pos = text.find(literal, pos + literal.size())) {
    matches->emplace_back(pos, pos + literal.size());
  }
}

}  // namespace

void SplitAtMatches(std::string_view text, const std::vector<std::pair<size_t, size_t>>& matches,
                    SplitBehavior behavior, bool invert, std::vector<std::string>* pieces) {
  std::vector<Part> parts;
  parts.reserve(matches.size() * 2 + 1);
  size_t prev = 0;
  for (const auto& [begin, end] : matches) {
    if (begin > prev) parts.push_back({prev, begin, invert});
    parts.push_back({begin, end, !invert});
    prev = end;
  }
  if (prev < text.size()) parts.push_back({prev, text.size(), invert});

  std::vector<Part> kept;
  kept.reserve(parts.size());
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      kept = std::move(parts);
      break;
    case SplitBehavior::kRemoved:
      for (const Part& p : parts) {
        if (!p.match) kept.push_back(p);
      }
      break;
    case SplitBehavior::kContiguous:
      for (const Part& p : parts) {
        if (p.match == previous_match && !kept.empty()) {
          kept.back().end = p.end;
        } else {
          kept.push_back(p);
        }
        previous_match = p.match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      // Only the first of several adjacent matches joins the piece before it (as HF does).
      for (const Part& p : parts) {
        if (p.match && !previous_match && !kept.empty()) {
          kept.back().end = p.end;
        } else {
          kept.push_back(p);
        }
        previous_match = p.match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->match && !previous_match && !kept.empty()) {
          kept.back().begin = it->begin;
        } else {
          kept.push_back(*it);
        }
        previous_match = it->match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
  }
  for (const Part& p : kept) {
    if (p.end > p.begin) pieces->emplace_back(text.substr(p.begin, p.end - p.begin));
  }
}

PreTokenizer::PreTokenizer() = default;
PreTokenizer::~PreTokenizer() = default;

Status PreTokenizer::CollectSteps(const Json& json, const std::string& what, int depth,
                                  std::vector<Step>* steps) {
  MP_REQUIRE(depth < 16, what, ": pre_tokenizers nested too deeply");
  MP_REQUIRE(json.is_object(), what, ": expected an object, got ", json.type_name());
  // Spelled out rather than MP_ASSIGN_OR_RETURN, which trips a GCC 12 -Wmaybe-uninitialized
  // false positive here.
  StatusOr<std::string> type_or = JsonGetString(json, "type", what);
  if (!type_or.ok()) return type_or.status();
  const std::string& type = *type_or;
  Step step;
  if (type == "Sequence") {
    MP_REQUIRE(json.contains("pretokenizers") && json["pretokenizers"].is_array(), what,
               ": Sequence needs a \"pretokenizers\" array");
    const Json& items = json["pretokenizers"];
    for (size_t i = 0; i < items.size(); ++i) {
      MP_RETURN_IF_ERROR(CollectSteps(items[i], what + ".pretokenizers[" + std::to_string(i) + "]",
                                      depth + 1, steps));
    }
    return OkStatus();
  }
  if (type == "ByteLevel") {
    step.kind = Step::Kind::kByteLevel;
    // Missing fields take the defaults of HF's ByteLevel::default().
    MP_ASSIGN_OR_RETURN(step.add_prefix_space, JsonGetBoolOr(json, "add_prefix_space", true, what));
    MP_ASSIGN_OR_RETURN(bool use_regex, JsonGetBoolOr(json, "use_regex", true, what));
    if (use_regex) {
      MP_ASSIGN_OR_RETURN(step.regex, Regex::Compile(kGpt2SplitPattern, what));
    }
    steps->push_back(std::move(step));
    return OkStatus();
  }
  if (type == "Split") {
    MP_REQUIRE(json.contains("pattern") && json["pattern"].is_object(), what,
               ": Split needs a \"pattern\" object ({\"Regex\": ...} or {\"String\": ...})");
    const Json& pattern = json["pattern"];
    if (pattern.contains("Regex")) {
      MP_ASSIGN_OR_RETURN(std::string regex, JsonGetString(pattern, "Regex", what + ".pattern"));
      MP_ASSIGN_OR_RETURN(step.regex, Regex::Compile(regex, what + ".pattern"));
    } else if (pattern.contains("String")) {
      MP_ASSIGN_OR_RETURN(step.literal, JsonGetString(pattern, "String", what + ".pattern"));
    } else {
      return InvalidArgumentError(what + ": Split pattern must have a \"Regex\" or \"String\"");
    }
    MP_ASSIGN_OR_RETURN(std::string behavior, JsonGetString(json, "behavior", what));
    MP_ASSIGN_OR_RETURN(step.behavior, ParseBehavior(behavior, what));
    MP_ASSIGN_OR_RETURN(step.invert, JsonGetBoolOr(json, "invert", false, what));
    steps->push_back(std::move(step));
    return OkStatus();
  }
  return UnimplementedError(what + ": unsupported pre_tokenizer type \"" + type +
                            "\" (supported: ByteLevel, Split, Sequence)");
}

StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::FromJson(const Json& json,
                                                               const std::string& what) {
  if (json.is_null()) return std::unique_ptr<PreTokenizer>();
  std::unique_ptr<PreTokenizer> pre(new PreTokenizer());
  MP_RETURN_IF_ERROR(CollectSteps(json, what, 0, &pre->steps_));
  return pre;
}

Status PreTokenizer::Split(std::string_view text, std::vector<std::string>* pieces) const {
  if (text.empty()) return OkStatus();
  std::vector<std::string> current;
  current.emplace_back(text);
  std::vector<std::string> next;
  std::vector<std::string> split;
  std::vector<std::pair<size_t, size_t>> matches;
  for (const Step& step : steps_) {
    next.clear();
    for (std::string& piece : current) {
      if (step.kind == Step::Kind::kSplit) {
        matches.clear();
        if (step.regex != nullptr) {
          MP_RETURN_IF_ERROR(step.regex->FindAll(piece, &matches));
        } else {
          FindLiteral(piece, step.literal, &matches);
        }
        SplitAtMatches(piece, matches, step.behavior, step.invert, &next);
        continue;
      }
      // ByteLevel prepends its space to every piece it sees, not only the first of the text.
      if (step.add_prefix_space && piece[0] != ' ') piece.insert(0, 1, ' ');
      split.clear();
      if (step.regex != nullptr) {
        matches.clear();
        MP_RETURN_IF_ERROR(step.regex->FindAll(piece, &matches));
        SplitAtMatches(piece, matches, SplitBehavior::kIsolated, false, &split);
      } else {
        split.push_back(std::move(piece));
      }
      for (const std::string& s : split) {
        std::string mapped;
        mapped.reserve(s.size() * 2);
        AppendByteLevel(s, &mapped);
        next.push_back(std::move(mapped));
      }
    }
    current.swap(next);
  }
  for (std::string& piece : current) pieces->push_back(std::move(piece));
  return OkStatus();
}

}  // namespace millipede::tokenizer_internal
