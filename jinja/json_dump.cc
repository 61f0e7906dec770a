// json.dumps for template values (the tojson filter).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "jinja/py_text.h"
#include "jinja/value.h"

namespace millipede::jinja {
namespace {

void AppendEscape(char32_t unit, std::string* out) {
  char esc[16];
  std::snprintf(esc, sizeof(esc), "\\u%04x", static_cast<unsigned>(unit));
  *out += esc;
}

// json.dumps' string encoder: ", \ and the C0 controls escaped; with ensure_ascii everything
// above U+007F as \uXXXX (surrogate pairs above the BMP).
void AppendJsonString(std::string_view text, bool ensure_ascii, std::string* out) {
  *out += '"';
  for (char32_t cp : DecodeUtf8(text)) {
    switch (cp) {
      case '"':
        *out += "\\\"";
        continue;
      case '\\':
        *out += "\\\\";
        continue;
      case '\n':
        *out += "\\n";
        continue;
      case '\r':
        *out += "\\r";
        continue;
      case '\t':
        *out += "\\t";
        continue;
      case '\b':
        *out += "\\b";
        continue;
      case '\f':
        *out += "\\f";
        continue;
      default:
        break;
    }
    if (cp < 0x20 || (ensure_ascii && cp >= 0x7F && cp < 0x10000)) {
      AppendEscape(cp, out);
    } else if (ensure_ascii && cp >= 0x10000) {
      const char32_t v = cp - 0x10000;
      AppendEscape(0xD800 + (v >> 10), out);
      AppendEscape(0xDC00 + (v & 0x3FF), out);
    } else {
      AppendUtf8(cp, out);
    }
  }
  *out += '"';
}

class Dumper {
 public:
  explicit Dumper(const DumpOptions& options) : options_(options) {}

  Status Dump(const Value& v, int depth, std::string* out) {
    if (out->size() > options_.max_bytes) {
      return ResourceExhaustedError("tojson: the text exceeds " +
                                    std::to_string(options_.max_bytes) + " bytes");
    }
    if (depth > kMaxValueDepth) {
      return InvalidArgumentError("tojson: values nest deeper than " +
                                  std::to_string(kMaxValueDepth) + " levels");
    }
    switch (v.kind()) {
      case Value::Kind::kNone:
        *out += "null";
        return OkStatus();
      case Value::Kind::kBool:
        *out += v.as_bool() ? "true" : "false";
        return OkStatus();
      case Value::Kind::kInt:
        *out += std::to_string(v.as_int());
        return OkStatus();
      case Value::Kind::kFloat: {
        const double f = v.as_float();
        if (std::isnan(f)) {
          *out += "NaN";
        } else if (std::isinf(f)) {
          *out += f < 0 ? "-Infinity" : "Infinity";
        } else {
          *out += PyFloatRepr(f);
        }
        return OkStatus();
      }
      case Value::Kind::kString:
        AppendJsonString(v.as_string(), options_.ensure_ascii, out);
        return OkStatus();
      case Value::Kind::kList:
        return DumpList(v.as_list().items, depth, out);
      case Value::Kind::kDict:
        return DumpDict(v.as_dict(), depth, out);
      default:
        return InvalidArgumentError(std::string("tojson: Object of type ") + TypeName(v) +
                                    " is not JSON serializable");
    }
  }

 private:
  void NewLine(int depth, std::string* out) {
    if (!options_.indent) return;
    *out += '\n';
    for (int i = 0; i < depth; ++i) *out += *options_.indent;
  }

  Status DumpList(const std::vector<Value>& items, int depth, std::string* out) {
    if (items.empty()) {
      *out += "[]";
      return OkStatus();
    }
    *out += '[';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) *out += options_.item_separator;
      NewLine(depth + 1, out);
      MP_RETURN_IF_ERROR(Dump(items[i], depth + 1, out));
    }
    NewLine(depth, out);
    *out += ']';
    return OkStatus();
  }

  Status DumpDict(const DictData& dict, int depth, std::string* out) {
    if (dict.items.empty()) {
      *out += "{}";
      return OkStatus();
    }
    std::vector<const std::pair<std::string, Value>*> items;
    for (const auto& item : dict.items) items.push_back(&item);
    if (options_.sort_keys) {
      std::stable_sort(items.begin(), items.end(),
                       [](const auto* a, const auto* b) { return a->first < b->first; });
    }
    *out += '{';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) *out += options_.item_separator;
      NewLine(depth + 1, out);
      AppendJsonString(items[i]->first, options_.ensure_ascii, out);
      *out += options_.key_separator;
      MP_RETURN_IF_ERROR(Dump(items[i]->second, depth + 1, out));
    }
    NewLine(depth, out);
    *out += '}';
    return OkStatus();
  }

  const DumpOptions& options_;
};

}  // namespace

StatusOr<std::string> DumpJson(const Value& v, const DumpOptions& options) {
  std::string out;
  Dumper dumper(options);
  MP_RETURN_IF_ERROR(dumper.Dump(v, 0, &out));
  return out;
}

}  // namespace millipede::jinja
