// What a policy importer (minference_import.h, duo_import.h) hands back: the policy and the
// choices its mapping made, for the tool to report.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "policy/attention_policy.h"

namespace millipede {

struct PolicyImport {
  AttentionPolicy policy;
  // Places where the import chose among different inputs (a KV head whose query heads asked for
  // different patterns, a layer whose a-shape sinks were raised to one count), one line each.
  std::vector<std::string> notes;
  // KV heads whose query heads had one pattern with different parameters (maxima taken).
  int64_t merged_parameter_heads = 0;
  // How many KV heads are retrieval (full) heads, for importers that split heads so.
  int64_t retrieval_heads = 0;
};

}  // namespace millipede
