#include "policy/minference_import.h"

#include <algorithm>
#include <map>

#include "checkpoint/strict_json.h"
#include "common/json_util.h"

namespace millipede {
namespace {

// MInference's vertical-slash kernel keeps at least this many columns and diagonals.
constexpr int64_t kMinVertical = 30;
constexpr int64_t kMinSlash = 50;
// Its block-sparse kernel: the top 100 key blocks of 64 per query block.
constexpr int64_t kBlockSparseBlock = 64;
constexpr int64_t kBlockSparseTopBlocks = 100;
// The queries whose attention picks the columns and diagonals.
constexpr int64_t kLastQueries = 64;

// One query head's entry, its sizes as the config gives them.
struct QueryHeadEntry {
  PrefillPattern pattern = PrefillPattern::kDense;
  int64_t vertical_size = 0;
  int64_t slash_size = 0;
};

StatusOr<PrefillPattern> ParseMInferencePattern(const Json& v, const std::string& where) {
  MP_REQUIRE(v.is_string(), where, ": the pattern must be a string, got ", DescribeJson(v));
  const std::string name = v.get<std::string>();
  if (name == "vertical_and_slash") return PrefillPattern::kVerticalSlash;
  if (name == "block_sparse") return PrefillPattern::kBlockSparse;
  if (name == "stream_llm" || name == "a_shape") return PrefillPattern::kAShape;
  return InvalidArgumentError(where + ": unknown pattern \"" + name +
                              "\" (known: vertical_and_slash, block_sparse, stream_llm, a_shape)");
}

StatusOr<int64_t> ReadSize(const Json& v, const char* name, const std::string& where) {
  MP_REQUIRE(v.is_number_integer(), where, ": ", name, " must be an integer, got ",
             DescribeJson(v));
  // Sizes are token counts; anything near 2^62 is a broken file, not a budget.
  MP_REQUIRE(!v.is_number_unsigned() || v.get<uint64_t>() < (uint64_t{1} << 62), where, ": ", name,
             " ", DescribeJson(v), " is out of range");
  const int64_t size = v.get<int64_t>();
  MP_REQUIRE(size >= 0, where, ": ", name, " must be >= 0, got ", size);
  return size;
}

// [pattern, vertical_size, slash_size, score] (the score may be left out).
StatusOr<QueryHeadEntry> ReadEntry(const Json& v, const std::string& where) {
  MP_REQUIRE(v.is_array() && (v.size() == 3 || v.size() == 4), where,
             ": expected [pattern, vertical_size, slash_size, score], got ", DescribeJson(v));
  QueryHeadEntry e;
  MP_ASSIGN_OR_RETURN(e.pattern, ParseMInferencePattern(v[0], where));
  MP_ASSIGN_OR_RETURN(e.vertical_size, ReadSize(v[1], "vertical_size", where));
  MP_ASSIGN_OR_RETURN(e.slash_size, ReadSize(v[2], "slash_size", where));
  if (v.size() == 4)
    MP_REQUIRE(v[3].is_number(), where, ": the score must be a number, got ", DescribeJson(v[3]));
  if (e.pattern == PrefillPattern::kAShape)
    MP_REQUIRE(e.vertical_size > 0 && e.slash_size > 0, where,
               ": stream_llm needs at least one initial token (vertical_size) and a local window "
               "(slash_size), got ",
               e.vertical_size, " and ", e.slash_size);
  return e;
}

// A layer object: query head "0" .. "num_heads - 1", each exactly once.
StatusOr<std::vector<QueryHeadEntry>> ReadLayer(const Json& layer, int64_t num_heads,
                                                const std::string& where) {
  MP_REQUIRE(layer.is_object(), where, ": expected an object mapping query heads to patterns, got ",
             DescribeJson(layer));
  std::map<int64_t, QueryHeadEntry> heads;
  for (const auto& [key, value] : layer.items()) {
    const std::string at = where + ", query head \"" + key + "\"";
    const bool decimal =
        !key.empty() && key.size() < 10 &&
        std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    MP_REQUIRE(decimal, at, ": a query head key must be a head index");
    const int64_t head = std::stoll(key);
    MP_REQUIRE(head < num_heads, at, ": the model has ", num_heads,
               " query heads (num_attention_heads)");
    MP_REQUIRE(std::to_string(head) == key, at, ": write the index without leading zeros");
    MP_ASSIGN_OR_RETURN(heads[head], ReadEntry(value, at));
  }
  std::vector<QueryHeadEntry> out;
  for (int64_t h = 0; h < num_heads; ++h) {
    auto it = heads.find(h);
    MP_REQUIRE(it != heads.end(), where, ": query head ", h, " is missing (the model has ",
               num_heads, " query heads, num_attention_heads; the layer lists ", heads.size(), ")");
    out.push_back(it->second);
  }
  return out;
}

// The KV head's prefill for its group of query heads (the rule in the header).
HeadPrefillPolicy MergeGroup(const std::vector<QueryHeadEntry>& group, bool* mixed_patterns,
                             bool* mixed_parameters) {
  HeadPrefillPolicy head;
  for (PrefillPattern p :
       {PrefillPattern::kVerticalSlash, PrefillPattern::kBlockSparse, PrefillPattern::kAShape}) {
    if (std::any_of(group.begin(), group.end(),
                    [&](const QueryHeadEntry& e) { return e.pattern == p; })) {
      head.pattern = p;
      break;
    }
  }
  *mixed_patterns = *mixed_parameters = false;
  const QueryHeadEntry* first = nullptr;
  int64_t vertical = 0, slash = 0;
  for (const QueryHeadEntry& e : group) {
    if (e.pattern != head.pattern) {
      *mixed_patterns = true;
      continue;
    }
    if (first == nullptr) first = &e;
    // Block-sparse sizes are not used, so they never differ in effect.
    if (head.pattern != PrefillPattern::kBlockSparse &&
        (e.vertical_size != first->vertical_size || e.slash_size != first->slash_size))
      *mixed_parameters = true;
    vertical = std::max(vertical, e.vertical_size);
    slash = std::max(slash, e.slash_size);
  }
  switch (head.pattern) {
    case PrefillPattern::kVerticalSlash:
      head.vertical_slash = {kLastQueries, std::max(vertical, kMinVertical),
                             std::max(slash, kMinSlash)};
      break;
    case PrefillPattern::kBlockSparse:
      head.block_sparse = {kBlockSparseBlock, kBlockSparseTopBlocks};
      break;
    case PrefillPattern::kAShape:
      head.a_shape = {vertical, slash};
      break;
    case PrefillPattern::kDense:
    case PrefillPattern::kAntidiagonal:  // MInference has no such pattern: never mapped to it
      break;
  }
  return head;
}

std::string PatternCounts(const std::vector<QueryHeadEntry>& group) {
  std::map<std::string, int> counts;
  for (const QueryHeadEntry& e : group) ++counts[PrefillPatternName(e.pattern)];
  std::string s;
  for (const auto& [name, n] : counts)
    s += (s.empty() ? "" : ", ") + name + " " + std::to_string(n);
  return s;
}

// The layer's a-shape KV heads all take its largest sink count.
void ShareSinks(LayerPolicy* layer, size_t l, std::vector<std::string>* notes) {
  int64_t sink = 0, smallest = 0;
  for (const HeadPrefillPolicy& h : layer->prefill) {
    if (h.pattern != PrefillPattern::kAShape) continue;
    smallest = sink == 0 ? h.a_shape.sink_tokens : std::min(smallest, h.a_shape.sink_tokens);
    sink = std::max(sink, h.a_shape.sink_tokens);
  }
  if (sink == smallest) return;
  for (HeadPrefillPolicy& h : layer->prefill)
    if (h.pattern == PrefillPattern::kAShape) h.a_shape.sink_tokens = sink;
  notes->push_back("layer " + std::to_string(l) + ": a-shape heads had " +
                   std::to_string(smallest) + " to " + std::to_string(sink) +
                   " initial tokens; all keep " + std::to_string(sink) +
                   " (a layer's a-shape heads share one sink count)");
}

}  // namespace

StatusOr<PolicyImport> ImportMInferenceConfig(std::string_view json_text, const ModelConfig& model,
                                              const MInferenceImportOptions& options,
                                              const std::string& what) {
  const int64_t num_layers = model.num_hidden_layers;
  const int64_t num_heads = model.num_attention_heads;
  const int64_t num_kv_heads = model.num_key_value_heads;
  MP_REQUIRE(num_layers > 0 && num_kv_heads > 0 && num_heads % num_kv_heads == 0, what,
             ": the model's shape (", num_layers, " layers, ", num_heads, " query heads, ",
             num_kv_heads, " KV heads) is not one a policy can be made for");
  MP_REQUIRE(options.dense_below_tokens >= 0, what, ": dense_below_tokens must be >= 0");
  MP_REQUIRE(options.starting_layer >= 0 && options.starting_layer <= num_layers, what,
             ": starting layer ", options.starting_layer, " outside the model's [0, ", num_layers,
             "]");
  MP_ASSIGN_OR_RETURN(Json root, ParseJsonRejectingDuplicateKeys(json_text, what, "key"));
  MP_REQUIRE(root.is_array(), what, ": expected a list with one object per layer, got ",
             DescribeJson(root));
  MP_REQUIRE(static_cast<int64_t>(root.size()) == num_layers, what, " lists ", root.size(),
             " layers but the model has ", num_layers, " (num_hidden_layers)");
  PolicyImport out;
  out.policy = DensePolicy(num_layers, num_kv_heads);
  out.policy.dense_below_tokens = options.dense_below_tokens;
  const int64_t group_size = num_heads / num_kv_heads;
  for (int64_t l = 0; l < num_layers; ++l) {
    const std::string where = what + ": layer " + std::to_string(l);
    // Every layer is checked, also those left dense.
    MP_ASSIGN_OR_RETURN(std::vector<QueryHeadEntry> heads, ReadLayer(root[l], num_heads, where));
    if (l < options.starting_layer) continue;
    LayerPolicy& layer = out.policy.layers[static_cast<size_t>(l)];
    for (int64_t g = 0; g < num_kv_heads; ++g) {
      const std::vector<QueryHeadEntry> group(heads.begin() + g * group_size,
                                              heads.begin() + (g + 1) * group_size);
      bool mixed_patterns = false, mixed_parameters = false;
      layer.prefill[static_cast<size_t>(g)] = MergeGroup(group, &mixed_patterns, &mixed_parameters);
      if (mixed_parameters) ++out.merged_parameter_heads;
      if (mixed_patterns)
        out.notes.push_back("layer " + std::to_string(l) + ", KV head " + std::to_string(g) +
                            " (query heads " + std::to_string(g * group_size) + "-" +
                            std::to_string((g + 1) * group_size - 1) +
                            "): " + PatternCounts(group) + " -> " +
                            PrefillPatternName(layer.prefill[static_cast<size_t>(g)].pattern));
    }
    ShareSinks(&layer, static_cast<size_t>(l), &out.notes);
  }
  MP_RETURN_IF_ERROR(ValidateAttentionPolicy(out.policy, num_layers, num_kv_heads, what));
  return out;
}

}  // namespace millipede
