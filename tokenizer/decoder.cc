#include "tokenizer/decoder.h"

#include <cstdint>

#include "tokenizer/byte_level.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"

namespace millipede::tokenizer_internal {

struct Decoder::Step {
  enum class Kind { kJoinWithSpaces, kByteLevel, kByteFallback, kFuse, kReplace, kStrip, kMetaspace };
  Kind kind = Kind::kFuse;
  std::string pattern;  // Replace: the text replaced; Metaspace: the replacement character
  std::string content;  // Replace: what replaces it; Strip: the character stripped
  size_t start = 0;     // Strip: at most this many leading `content` characters go
  size_t stop = 0;      // Strip: at most this many trailing ones
  bool strip_first = false;  // Metaspace: the first token loses its replacement characters
};

namespace {

constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";

// Whether `text` is exactly one character.
bool IsOneCharacter(std::string_view text) {
  if (text.empty() || FindInvalidUtf8(text) != std::string_view::npos) return false;
  return Utf8SequenceLength(static_cast<unsigned char>(text[0])) == text.size();
}

// HF's test for a byte token: six bytes "<0x" + two characters u8::from_str_radix(_, 16)
// accepts (hex digits of either case, or '+' and one digit) + ">".
bool ParseByteToken(std::string_view token, uint8_t* byte) {
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return false;
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  int high = digit(token[3]);
  int low = digit(token[4]);
  if (token[3] == '+' && low >= 0) {
    *byte = static_cast<uint8_t>(low);
    return true;
  }
  if (high < 0 || low < 0) return false;
  *byte = static_cast<uint8_t>(high * 16 + low);
  return true;
}

// Length of a trailing UTF-8 sequence that is incomplete but may still be completed.
size_t IncompleteUtf8Tail(std::string_view text) {
  size_t n = text.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    auto byte = static_cast<unsigned char>(text[n - back]);
    if ((byte & 0xC0) == 0x80) continue;  // continuation: keep looking for the lead
    if (byte < 0xC0) return 0;
    return Utf8SequenceLength(byte) > back ? back : 0;
  }
  return 0;
}

// Length of the unit at text[pos]: a whole character when one is there, else one byte.
size_t UnitLength(std::string_view text, size_t pos) {
  size_t len = Utf8SequenceLength(static_cast<unsigned char>(text[pos]));
  if (len == 1 || pos + len > text.size()) return 1;
  return FindInvalidUtf8(text.substr(pos, len)) == std::string_view::npos ? len : 1;
}

}  // namespace

Decoder::Decoder() = default;
Decoder::~Decoder() = default;

Status Decoder::CollectSteps(const Json& json, const std::string& what, int depth,
                             std::vector<Step>* steps) {
  MP_REQUIRE(depth < 16, what, ": decoders nested too deeply");
  MP_REQUIRE(json.is_object(), what, ": expected an object, got ", json.type_name());
  StatusOr<std::string> type_or = JsonGetString(json, "type", what);
  if (!type_or.ok()) return type_or.status();
  const std::string& type = *type_or;
  Step step;
  if (type == "Sequence") {
    MP_REQUIRE(json.contains("decoders") && json["decoders"].is_array(), what,
               ": Sequence needs a \"decoders\" array");
    const Json& items = json["decoders"];
    for (size_t i = 0; i < items.size(); ++i) {
      MP_RETURN_IF_ERROR(CollectSteps(items[i], what + ".decoders[" + std::to_string(i) + "]",
                                      depth + 1, steps));
    }
    return OkStatus();
  }
  if (type == "ByteLevel") {
    step.kind = Step::Kind::kByteLevel;  // its options only matter for encoding
  } else if (type == "ByteFallback") {
    step.kind = Step::Kind::kByteFallback;
  } else if (type == "Fuse") {
    step.kind = Step::Kind::kFuse;
  } else if (type == "Replace") {
    step.kind = Step::Kind::kReplace;
    MP_REQUIRE(json.contains("pattern") && json["pattern"].is_object(), what,
               ": Replace needs a \"pattern\" object");
    const Json& pattern = json["pattern"];
    if (pattern.contains("Regex")) {
      return UnimplementedError(what + ": Replace with a Regex pattern is not supported in a "
                                       "decoder (only String)");
    }
    MP_ASSIGN_OR_RETURN(step.pattern, JsonGetString(pattern, "String", what + ".pattern"));
    MP_REQUIRE(!step.pattern.empty(), what, ": Replace pattern is empty");
    MP_ASSIGN_OR_RETURN(step.content, JsonGetString(json, "content", what));
  } else if (type == "Strip") {
    step.kind = Step::Kind::kStrip;
    MP_ASSIGN_OR_RETURN(step.content, JsonGetString(json, "content", what));
    MP_REQUIRE(IsOneCharacter(step.content), what, ": Strip content must be one character");
    MP_ASSIGN_OR_RETURN(int64_t start, JsonGetInt(json, "start", what));
    MP_ASSIGN_OR_RETURN(int64_t stop, JsonGetInt(json, "stop", what));
    MP_REQUIRE(start >= 0 && stop >= 0, what, ": Strip start and stop must not be negative");
    step.start = static_cast<size_t>(start);
    step.stop = static_cast<size_t>(stop);
  } else if (type == "Metaspace") {
    step.kind = Step::Kind::kMetaspace;
    MP_ASSIGN_OR_RETURN(MetaspaceOptions options, ParseMetaspace(json, what));
    step.pattern = options.replacement;
    step.strip_first = options.prepend_scheme != PrependScheme::kNever;
  } else {
    return UnimplementedError(what + ": unsupported decoder type \"" + type +
                              "\" (supported: ByteLevel, ByteFallback, Fuse, Replace, Strip, "
                              "Metaspace, Sequence, null)");
  }
  steps->push_back(std::move(step));
  return OkStatus();
}

StatusOr<std::unique_ptr<Decoder>> Decoder::FromJson(const Json& json, const std::string& what) {
  std::unique_ptr<Decoder> decoder(new Decoder());
  if (json.is_null()) {
    Step join;
    join.kind = Step::Kind::kJoinWithSpaces;
    decoder->steps_.push_back(std::move(join));
  } else {
    MP_RETURN_IF_ERROR(CollectSteps(json, what, 0, &decoder->steps_));
  }
  return decoder;
}

DecodeState Decoder::NewState() const {
  DecodeState state;
  state.steps.resize(steps_.size());
  return state;
}

void Decoder::Push(std::string_view token, DecodeState* state, std::string* out) const {
  if (state->steps.size() != steps_.size()) state->steps.resize(steps_.size());
  Feed(0, token, /*end=*/true, state, out);
}

void Decoder::Finish(DecodeState* state, std::string* out) const {
  if (state->steps.size() != steps_.size()) state->steps.resize(steps_.size());
  FinishFrom(0, state, out);
  for (DecodeStepState& step : state->steps) step = DecodeStepState();
}

void Decoder::Feed(size_t index, std::string_view text, bool end, DecodeState* state,
                   std::string* out) const {
  if (index == steps_.size()) {
    out->append(text);
    return;
  }
  const Step& step = steps_[index];
  DecodeStepState& st = state->steps[index];
  auto next = [&](std::string_view t, bool e) { Feed(index + 1, t, e, state, out); };

  // Steps that look at whole tokens collect the pieces of one first.
  std::string whole;
  std::string_view token = text;
  if (step.kind == Step::Kind::kByteLevel || step.kind == Step::Kind::kByteFallback) {
    if (!end) {
      st.buffer.append(text);
      return;
    }
    if (!st.buffer.empty()) {
      whole = std::move(st.buffer);
      whole.append(text);
      st.buffer.clear();
      token = whole;
    }
  }

  switch (step.kind) {
    case Step::Kind::kJoinWithSpaces:
      if (!st.in_token) {
        if (st.tokens_seen > 0) next(" ", false);
        st.in_token = true;
      }
      next(text, false);
      if (end) {
        ++st.tokens_seen;
        st.in_token = false;
      }
      return;

    case Step::Kind::kByteLevel: {
      // All tokens come out as one: HF's ByteLevel decoder joins its output.
      std::string bytes;
      if (!AppendBytesFromByteLevel(token, &bytes)) bytes.assign(token);
      next(bytes, false);
      return;
    }

    case Step::Kind::kByteFallback: {
      uint8_t byte = 0;
      if (ParseByteToken(token, &byte)) {
        st.byte_run.push_back(static_cast<char>(byte));
        return;
      }
      FlushByteRun(index, state, out);
      next(token, true);
      return;
    }

    case Step::Kind::kFuse:
      next(text, false);
      return;

    case Step::Kind::kReplace:
    case Step::Kind::kMetaspace: {
      const std::string& pattern = step.pattern;
      std::string_view content = step.content;
      if (step.kind == Step::Kind::kMetaspace) {
        content = st.tokens_seen == 0 && step.strip_first ? "" : " ";
      }
      std::string data = std::move(st.buffer);
      st.buffer.clear();
      data.append(text);
      std::string result;
      result.reserve(data.size());
      size_t pos = 0;
      for (size_t found = data.find(pattern); found != std::string::npos;
           found = data.find(pattern, pos)) {
        result.append(data, pos, found - pos);
        result.append(content);
        pos = found + pattern.size();
      }
      size_t keep = 0;
      if (!end) {
        // Hold back a tail that the next piece may complete into a match.
        for (size_t k = std::min(pattern.size() - 1, data.size() - pos); k > 0; --k) {
          if (data.compare(data.size() - k, k, pattern, 0, k) == 0) {
            keep = k;
            break;
          }
        }
        st.buffer = data.substr(data.size() - keep);
      }
      result.append(data, pos, data.size() - pos - keep);
      st.in_token = !end;
      if (end) ++st.tokens_seen;
      next(result, end);
      return;
    }

    case Step::Kind::kStrip: {
      std::string data = std::move(st.buffer);
      st.buffer.clear();
      data.append(text);
      size_t limit = data.size();
      if (!end) {
        limit -= IncompleteUtf8Tail(data);
        st.buffer = data.substr(limit);
      }
      const std::string& c = step.content;
      std::string result;
      result.reserve(limit);
      for (size_t pos = 0; pos < limit;) {
        size_t len = UnitLength(std::string_view(data).substr(0, limit), pos);
        std::string_view unit(data.data() + pos, len);
        pos += len;
        bool is_c = unit == c;
        if (!st.leading_done) {
          if (is_c && st.stripped < step.start) {
            ++st.stripped;
            continue;
          }
          st.leading_done = true;
        }
        if (is_c && step.stop > 0) {
          // Only the last `stop` characters of a trailing run can go: hold those back.
          if (st.held < step.stop) {
            ++st.held;
          } else {
            result.append(c);
          }
          continue;
        }
        for (; st.held > 0; --st.held) result.append(c);
        result.append(unit);
      }
      st.in_token = !end;
      if (end) {
        st.held = 0;  // the trailing run is stripped
        st.stripped = 0;
        st.leading_done = false;
        ++st.tokens_seen;
      }
      next(result, end);
      return;
    }
  }
}

void Decoder::FlushByteRun(size_t index, DecodeState* state, std::string* out) const {
  DecodeStepState& st = state->steps[index];
  if (st.byte_run.empty()) return;
  std::string run = std::move(st.byte_run);
  st.byte_run.clear();
  if (FindInvalidUtf8(run) == std::string_view::npos) {
    Feed(index + 1, run, /*end=*/true, state, out);
    return;
  }
  // A run that is not valid UTF-8 as a whole becomes one U+FFFD per byte, valid parts too.
  for (size_t i = 0; i < run.size(); ++i) {
    Feed(index + 1, kReplacementCharacter, /*end=*/true, state, out);
  }
}

void Decoder::FinishFrom(size_t index, DecodeState* state, std::string* out) const {
  if (index == steps_.size()) return;
  const Step& step = steps_[index];
  DecodeStepState& st = state->steps[index];
  switch (step.kind) {
    case Step::Kind::kJoinWithSpaces:
    case Step::Kind::kByteLevel:
    case Step::Kind::kFuse:
      // These emit all tokens as one, which ends with the list.
      if (!st.buffer.empty()) Feed(index, "", /*end=*/true, state, out);
      Feed(index + 1, "", /*end=*/true, state, out);
      break;
    case Step::Kind::kByteFallback:
      if (!st.buffer.empty()) Feed(index, "", /*end=*/true, state, out);
      FlushByteRun(index, state, out);
      break;
    case Step::Kind::kReplace:
    case Step::Kind::kMetaspace:
    case Step::Kind::kStrip:
      if (st.in_token || !st.buffer.empty()) Feed(index, "", /*end=*/true, state, out);
      break;
  }
  FinishFrom(index + 1, state, out);
}

}  // namespace millipede::tokenizer_internal
