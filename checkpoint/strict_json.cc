#include "checkpoint/strict_json.h"

#include <stdexcept>

#include <cstdint>
#include <set>
#include <vector>

namespace millipede {

bool IsValidUtf8(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    // Lead byte: sequence length and the smallest code point that length may encode.
    static constexpr uint32_t kMinCode[5] = {0, 0, 0x80, 0x800, 0x10000};
    int len;
    uint32_t code;
    if ((c & 0xe0) == 0xc0) {
      len = 2;
      code = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3;
      code = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4;
      code = c & 0x07;
    } else {
      return false;  // a continuation byte without a lead, or 0xf8..0xff
    }
    if (n - i < static_cast<size_t>(len)) return false;
    for (int k = 1; k < len; ++k) {
      const unsigned char cc = p[i + k];
      if ((cc & 0xc0) != 0x80) return false;
      code = (code << 6) | (cc & 0x3f);
    }
    if (code < kMinCode[len] || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return false;
    i += len;
  }
  return true;
}

namespace {

// Tracks the keys seen in each open object while nlohmann parses, remembering the first repeat.
class DuplicateKeyFinder {
 public:
  bool OnEvent(Json::parse_event_t event, const Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
        // The enclosing object's most recent key names this object (through any arrays).
        objects_.push_back({{}, {}, objects_.empty() ? std::string() : objects_.back().last_key});
        break;
      case Json::parse_event_t::object_end:
        if (!objects_.empty()) objects_.pop_back();
        break;
      case Json::parse_event_t::key:
        if (!objects_.empty() && parsed.is_string()) {
          Frame& top = objects_.back();
          top.last_key = parsed.get_ref<const std::string&>();
          if (!top.keys.insert(top.last_key).second && !found_) {
            found_ = true;
            key_ = top.last_key;
            top_level_ = objects_.size() == 1;
            parent_ = top.parent_key;
          }
        }
        break;
      default: break;
    }
    return true;
  }

  bool found() const { return found_; }
  const std::string& key() const { return key_; }
  bool top_level() const { return top_level_; }
  const std::string& parent() const { return parent_; }

 private:
  struct Frame {
    std::set<std::string> keys;
    std::string last_key;
    std::string parent_key;
  };
  std::vector<Frame> objects_;
  bool found_ = false;
  bool top_level_ = false;
  std::string key_;
  std::string parent_;
};

}  // namespace

StatusOr<Json> ParseJsonRejectingDuplicateKeys(std::string_view text, const std::string& what,
                                               const char* top_level_key_noun) {
  if (!IsValidUtf8(text)) return InvalidArgumentError(what + ": not valid UTF-8");
  DuplicateKeyFinder finder;
  Json result;
  try {
    result = Json::parse(
        text.begin(), text.end(),
        [&finder](int depth, Json::parse_event_t event, Json& parsed) {
          if (depth > kMaxJsonDepth)
            throw std::length_error("JSON nested deeper than " +
                                    std::to_string(kMaxJsonDepth) + " levels");
          return finder.OnEvent(event, parsed);
        },
        /*allow_exceptions=*/true);
  } catch (const std::length_error& e) {
    return InvalidArgumentError(what + ": " + e.what());
  } catch (const Json::exception& e) {
    return InvalidArgumentError(what + ": invalid JSON: " + e.what());
  }
  if (finder.found()) {
    if (finder.top_level()) {
      return InvalidArgumentError(what + ": duplicate " + top_level_key_noun + " \"" +
                                  finder.key() + "\"");
    }
    return InvalidArgumentError(what + ": duplicate key \"" + finder.key() + "\" in \"" +
                                finder.parent() + "\"");
  }
  return result;
}

}  // namespace millipede
