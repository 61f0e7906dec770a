// The facts about each prefill pattern and decode role that the policy code and the workers both
// need, one table entry each: its names in policy files, its letter in the summary table, which
// parameters it reads, whether its index is built from the prompt at run time, whether it is
// layer-wide. Parsing, validation, the policy writer and the summary read these tables instead of
// switching on the enums. How a worker runs a pattern (its index op, its kernel, its decode
// strategy) is the worker's registry (worker/attention/attention_registry.h); the coordinator
// sees only these facts and the PolicyCapabilities the workers report.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "policy/attention_policy.h"

namespace millipede {

// One positive integer parameter of a pattern or role: its field name in the policy file's
// parameter object and where it lives in `Owner` (HeadPrefillPolicy for a prefill pattern,
// whose parameters are per KV head; AttentionPolicy for a decode role, whose are model-wide).
template <typename Owner>
struct PolicyParam {
  const char* name;               // "window_tokens"
  int64_t (*read)(const Owner&);  // its value
  int64_t& (*ref)(Owner&);        // the value to set
};

struct PrefillPatternFacts {
  PrefillPattern pattern = PrefillPattern::kDense;
  const char* name = nullptr;   // in policy files and summaries: "a-shape"
  const char* alias = nullptr;  // another name the parser accepts ("streaming"), or null
  char code = '?';              // its letter in the summary table
  // Its index is built from the prompt at run time (MInference's dynamic sparse patterns): its
  // pairs are known only after the run, and its layers are not split into head groups.
  bool dynamic_sparse = false;
  // Its parameter object in policy files ("a_shape"; null: it has no parameters) and the fields
  // it reads from it, in file order.
  const char* params_key = nullptr;
  std::vector<PolicyParam<HeadPrefillPolicy>> params = {};
  // The most keys one query attends (the expected density's budget); null: every causal key.
  int64_t (*key_budget)(const HeadPrefillPolicy&) = nullptr;
};

struct DecodeRoleFacts {
  DecodeRole role = DecodeRole::kFull;
  const char* name = nullptr;   // "streaming-head"
  const char* alias = nullptr;  // another name the parser accepts ("h2o"), or null
  char code = '?';              // its letter in the summary table
  // Every KV head of a layer has it when one has (the rules in attention_policy.h).
  bool layer_wide = false;
  // Its model-wide parameter object ("filter"; null: none) and the fields it reads, in order.
  const char* params_key = nullptr;
  std::vector<PolicyParam<AttentionPolicy>> params = {};
};

// Every prefill pattern, in enum order (entry i is pattern i).
std::span<const PrefillPatternFacts> PrefillPatternTable();
// Every decode role, in enum order.
std::span<const DecodeRoleFacts> DecodeRoleTable();

// The entry of `p` (`r`), or null for a value that is no enumerator (a corrupt message).
const PrefillPatternFacts* FindPatternFacts(PrefillPattern p);
const DecodeRoleFacts* FindRoleFacts(DecodeRole r);

}  // namespace millipede
