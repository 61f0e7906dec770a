#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <utility>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace millipede::tokenizer_internal {

const char kGpt2SplitPattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char kLlama3SplitPattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|)"
    R"(\s*[\r\n]+|\s+(?!\S)|\s+)";

struct PreTokenizer::Step {
  enum class Kind { kSplit, kByteLevel, kMetaspace };
  Kind kind = Kind::kSplit;
  std::unique_ptr<Regex> regex;  // Split's Regex pattern, or ByteLevel's use_regex
  std::string literal;           // Split's String pattern (when regex is null)
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;
  MetaspaceOptions metaspace;
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

bool IsOneCharacter(std::string_view text) {
  if (text.empty() || FindInvalidUtf8(text) != std::string_view::npos) return false;
  return Utf8SequenceLength(static_cast<unsigned char>(text[0])) == text.size();
}

}  // namespace

StatusOr<MetaspaceOptions> ParseMetaspace(const Json& json, const std::string& what) {
  MetaspaceOptions options;
  MP_ASSIGN_OR_RETURN(options.replacement, JsonGetString(json, "replacement", what));
  MP_REQUIRE(IsOneCharacter(options.replacement), what,
             ": Metaspace replacement must be one character, got \"", options.replacement, "\"");
  MP_ASSIGN_OR_RETURN(std::string scheme, JsonGetStringOr(json, "prepend_scheme", "always", what));
  if (scheme == "always") {
    options.prepend_scheme = PrependScheme::kAlways;
  } else if (scheme == "first") {
    options.prepend_scheme = PrependScheme::kFirst;
  } else if (scheme == "never") {
    options.prepend_scheme = PrependScheme::kNever;
  } else {
    return InvalidArgumentError(what + ": unknown Metaspace prepend_scheme \"" + scheme +
                                "\" (expected always, first or never)");
  }
  if (json.contains("add_prefix_space") && !json["add_prefix_space"].is_null()) {
    MP_ASSIGN_OR_RETURN(bool add_prefix_space, JsonGetBool(json, "add_prefix_space", what));
    MP_REQUIRE(add_prefix_space || options.prepend_scheme == PrependScheme::kNever, what,
               ": add_prefix_space false does not match prepend_scheme \"", scheme, "\"");
  }
  MP_ASSIGN_OR_RETURN(options.split, JsonGetBoolOr(json, "split", true, what));
  return options;
}

void SplitAtMatches(std::string_view text, const std::vector<std::pair<size_t, size_t>>& matches,
                    SplitBehavior behavior, bool invert, std::vector<std::string>* pieces) {
  SplitAtMatches(text, matches, behavior, invert, pieces, nullptr);
}

void SplitAtMatches(std::string_view text, const std::vector<std::pair<size_t, size_t>>& matches,
                    SplitBehavior behavior, bool invert, std::vector<std::string>* pieces,
                    std::vector<size_t>* begins) {
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
    if (p.end <= p.begin) continue;
    pieces->emplace_back(text.substr(p.begin, p.end - p.begin));
    if (begins != nullptr) begins->push_back(p.begin);
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
  if (type == "Metaspace") {
    step.kind = Step::Kind::kMetaspace;
    MP_ASSIGN_OR_RETURN(step.metaspace, ParseMetaspace(json, what));
    steps->push_back(std::move(step));
    return OkStatus();
  }
  if (type == "Digits") {
    // HF splits at characters with Rust's char::is_numeric: general category N, like \p{N}.
    MP_ASSIGN_OR_RETURN(bool individual, JsonGetBool(json, "individual_digits", what));
    MP_ASSIGN_OR_RETURN(step.regex, Regex::Compile(R"(\p{N})", what));
    step.behavior = individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous;
    steps->push_back(std::move(step));
    return OkStatus();
  }
  return UnimplementedError(what + ": unsupported pre_tokenizer type \"" + type +
                            "\" (supported: ByteLevel, Split, Metaspace, Digits, Sequence)");
}

StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::FromJson(const Json& json,
                                                               const std::string& what) {
  if (json.is_null()) return std::unique_ptr<PreTokenizer>();
  std::unique_ptr<PreTokenizer> pre(new PreTokenizer());
  MP_RETURN_IF_ERROR(CollectSteps(json, what, 0, &pre->steps_));
  return pre;
}

Status PreTokenizer::Split(std::string_view text, std::vector<std::string>* pieces,
                          bool at_start) const {
  if (text.empty()) return OkStatus();
  // Each piece with whether it starts where the input starts (HF: original offset 0).
  std::vector<std::string> current;
  std::vector<bool> current_first;
  current.emplace_back(text);
  current_first.push_back(at_start);
  std::vector<std::string> next;
  std::vector<bool> next_first;
  std::vector<std::string> split;
  std::vector<size_t> begins;
  std::vector<std::pair<size_t, size_t>> matches;
  for (const Step& step : steps_) {
    next.clear();
    next_first.clear();
    for (size_t i = 0; i < current.size(); ++i) {
      std::string& piece = current[i];
      const bool first = current_first[i];
      begins.clear();
      if (step.kind == Step::Kind::kSplit) {
        matches.clear();
        if (step.regex != nullptr) {
          MP_RETURN_IF_ERROR(step.regex->FindAll(piece, &matches));
        } else {
          FindLiteral(piece, step.literal, &matches);
        }
        SplitAtMatches(piece, matches, step.behavior, step.invert, &next, &begins);
        for (size_t begin : begins) next_first.push_back(first && begin == 0);
        continue;
      }
      if (step.kind == Step::Kind::kMetaspace) {
        const std::string& rep = step.metaspace.replacement;
        std::string replaced;
        replaced.reserve(piece.size() + rep.size());
        for (char c : piece) {
          if (c == ' ') {
            replaced += rep;
          } else {
            replaced.push_back(c);
          }
        }
        const PrependScheme scheme = step.metaspace.prepend_scheme;
        bool prepend = scheme == PrependScheme::kAlways || (scheme == PrependScheme::kFirst && first);
        if (prepend && replaced.compare(0, rep.size(), rep) != 0) replaced.insert(0, rep);
        if (!step.metaspace.split) {
          next.push_back(std::move(replaced));
          next_first.push_back(first);
          continue;
        }
        matches.clear();
        FindLiteral(replaced, rep, &matches);
        SplitAtMatches(replaced, matches, SplitBehavior::kMergedWithNext, false, &next, &begins);
        for (size_t begin : begins) next_first.push_back(first && begin == 0);
        continue;
      }
      // ByteLevel prepends its space to every piece it sees, not only the first of the text.
      if (step.add_prefix_space && piece[0] != ' ') piece.insert(0, 1, ' ');
      split.clear();
      if (step.regex != nullptr) {
        matches.clear();
        MP_RETURN_IF_ERROR(step.regex->FindAll(piece, &matches));
        SplitAtMatches(piece, matches, SplitBehavior::kIsolated, false, &split, &begins);
      } else {
        split.push_back(std::move(piece));
        begins.push_back(0);
      }
      for (size_t j = 0; j < split.size(); ++j) {
        std::string mapped;
        mapped.reserve(split[j].size() * 2);
        AppendByteLevel(split[j], &mapped);
        next.push_back(std::move(mapped));
        next_first.push_back(first && begins[j] == 0);
      }
    }
    current.swap(next);
    current_first.swap(next_first);
  }
  for (std::string& piece : current) pieces->push_back(std::move(piece));
  return OkStatus();
}

}  // namespace millipede::tokenizer_internal
