// JSON parsing for untrusted file headers: UTF-8 checked and duplicate keys rejected.
#pragma once

#include <string>
#include <string_view>

#include "common/json_util.h"
#include "common/status.h"

namespace millipede {

// True if `text` is well-formed UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF).
bool IsValidUtf8(std::string_view text);

// Parses `text` like ParseJson, but also rejects a key that appears twice in one object.
// nlohmann::json silently keeps the last of two equal keys; for file headers that would hide a
// second tensor of the same name, so it must be an error. A duplicate at the top level is named
// with `top_level_key_noun` ("tensor name"); nested ones name their enclosing key. Errors are
// InvalidArgument and start with `what`.
StatusOr<Json> ParseJsonRejectingDuplicateKeys(std::string_view text, const std::string& what,
                                               const char* top_level_key_noun = "key");

}  // namespace millipede
