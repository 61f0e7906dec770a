#include "policy/duo_import.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include "checkpoint/strict_json.h"
#include "common/json_util.h"

namespace millipede {
namespace {

// How far outside [0, 1] a saved gate may lie (see the header).
constexpr double kGateSlack = 0.05;

std::string_view Trim(std::string_view s) {
  const size_t begin = s.find_first_not_of(" \r");
  if (begin == std::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(" \r") - begin + 1);
}

// One field: a finite number within kGateSlack of [0, 1], clipped into it.
StatusOr<double> ParseGate(std::string_view field, const std::string& where) {
  const std::string text(Trim(field));
  MP_REQUIRE(!text.empty(), where, ": empty field (fields are separated by one tab)");
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  // ERANGE on a tiny value is an underflow to about 0, which is a fine gate.
  MP_REQUIRE(end == text.c_str() + text.size() && std::isfinite(v), where, ": \"", text,
             "\" is not a finite number");
  MP_REQUIRE(v >= -kGateSlack && v <= 1 + kGateSlack, where, ": gate ", text,
             " is outside [0, 1] (DuoAttention's gates are clamped to [0, 1] in training)");
  return std::clamp(v, 0.0, 1.0);
}

// The KV heads, streaming first: the ceil(q * (n - 1)) lowest gates (see the header).
std::vector<bool> RetrievalBySparsity(const DuoGates& gates, double sparsity) {
  const size_t n = gates.values.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return gates.values[a] < gates.values[b]; });
  // A little below the product so that 0.1 * 30 = 3.0000000000000004 streams 3 heads, not 4.
  const double wanted = std::ceil(sparsity * static_cast<double>(n - 1) - 1e-9);
  const size_t streaming =
      sparsity >= 1 ? n : static_cast<size_t>(std::clamp(wanted, 0.0, static_cast<double>(n)));
  std::vector<bool> retrieval(n, true);
  for (size_t i = 0; i < streaming; ++i) retrieval[order[i]] = false;
  return retrieval;
}

Status CheckShape(const DuoGates& gates, const ModelConfig& model, const std::string& what) {
  MP_REQUIRE(gates.num_layers == model.num_hidden_layers, what, " has ", gates.num_layers,
             " rows (layers) but the model has ", model.num_hidden_layers,
             " layers (num_hidden_layers)");
  if (gates.num_kv_heads != model.num_key_value_heads) {
    const std::string hint =
        gates.num_kv_heads == model.num_attention_heads
            ? " (that is its number of query heads; DuoAttention writes one gate per KV head)"
            : "";
    return InvalidArgumentError(what + " has " + std::to_string(gates.num_kv_heads) +
                                " columns (KV heads) but the model has " +
                                std::to_string(model.num_key_value_heads) +
                                " KV heads (num_key_value_heads)" + hint);
  }
  return OkStatus();
}

}  // namespace

StatusOr<DuoGates> ParseDuoGates(std::string_view text, const std::string& what) {
  DuoGates gates;
  int64_t first_line = 0;
  size_t pos = 0;
  for (int64_t line_no = 1; pos < text.size(); ++line_no) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (Trim(line).empty() || Trim(line).front() == '#') continue;
    const std::string where = what + ": line " + std::to_string(line_no);
    int64_t column = 0;
    for (size_t field_begin = 0;;) {
      const size_t tab = line.find('\t', field_begin);
      const std::string_view field =
          line.substr(field_begin, tab == std::string_view::npos ? line.size() - field_begin
                                                                 : tab - field_begin);
      ++column;
      MP_ASSIGN_OR_RETURN(double gate,
                          ParseGate(field, where + ", column " + std::to_string(column)));
      gates.values.push_back(gate);
      if (tab == std::string_view::npos) break;
      field_begin = tab + 1;
    }
    if (gates.num_layers == 0) {
      gates.num_kv_heads = column;
      first_line = line_no;
    }
    MP_REQUIRE(column == gates.num_kv_heads, where, " has ", column, " columns but line ",
               first_line, " has ", gates.num_kv_heads,
               " (every line holds one layer's gates, one per KV head)");
    ++gates.num_layers;
  }
  MP_REQUIRE(gates.num_layers > 0, what, ": no gates (expected one line per layer)");
  return gates;
}

StatusOr<DuoStreamingSizes> ParseDuoPatternConfig(std::string_view json_text,
                                                  const std::string& what) {
  MP_ASSIGN_OR_RETURN(Json root, ParseJsonRejectingDuplicateKeys(json_text, what, "key"));
  MP_REQUIRE(root.is_object(), what, ": expected a JSON object, got ", DescribeJson(root));
  DuoStreamingSizes sizes;
  MP_ASSIGN_OR_RETURN(sizes.sink, JsonGetInt(root, "sink_size", what));
  MP_ASSIGN_OR_RETURN(sizes.recent, JsonGetInt(root, "recent_size", what));
  MP_REQUIRE(sizes.sink > 0 && sizes.recent > 0, what,
             ": sink_size and recent_size must be positive, got ", sizes.sink, " and ",
             sizes.recent);
  return sizes;
}

StatusOr<PolicyImport> ImportDuoGates(const DuoGates& gates, const ModelConfig& model,
                                      const DuoImportOptions& options, const std::string& what) {
  MP_REQUIRE(options.threshold.has_value() != options.sparsity.has_value(), what,
             ": give exactly one of a threshold and a sparsity");
  if (options.threshold)
    MP_REQUIRE(std::isfinite(*options.threshold), what, ": the threshold must be finite");
  if (options.sparsity)
    MP_REQUIRE(*options.sparsity >= 0 && *options.sparsity <= 1, what,
               ": the sparsity (share of streaming heads) must be in [0, 1], got ",
               *options.sparsity);
  MP_REQUIRE(options.sizes.sink > 0 && options.sizes.recent > 0, what,
             ": the streaming heads need positive sink and recent sizes, got ", options.sizes.sink,
             " and ", options.sizes.recent);
  MP_REQUIRE(options.dense_below_tokens >= 0, what, ": dense_below_tokens must be >= 0");
  MP_RETURN_IF_ERROR(CheckShape(gates, model, what));
  MP_REQUIRE(gates.values.size() == static_cast<size_t>(gates.num_layers * gates.num_kv_heads),
             what, ": ", gates.values.size(), " gates for ", gates.num_layers, " x ",
             gates.num_kv_heads);

  std::vector<bool> retrieval(gates.values.size());
  if (options.sparsity) {
    retrieval = RetrievalBySparsity(gates, *options.sparsity);
  } else {
    for (size_t i = 0; i < gates.values.size(); ++i)
      retrieval[i] = gates.values[i] >= *options.threshold;
  }
  PolicyImport out;
  out.policy = DensePolicy(gates.num_layers, gates.num_kv_heads);
  out.policy.dense_below_tokens = options.dense_below_tokens;
  out.policy.streaming_head = {options.sizes.sink, options.sizes.recent};
  for (int64_t l = 0; l < gates.num_layers; ++l) {
    LayerPolicy& layer = out.policy.layers[static_cast<size_t>(l)];
    for (int64_t h = 0; h < gates.num_kv_heads; ++h) {
      if (retrieval[static_cast<size_t>(l * gates.num_kv_heads + h)]) {
        ++out.retrieval_heads;
        continue;
      }
      HeadPrefillPolicy& head = layer.prefill[static_cast<size_t>(h)];
      head.pattern = PrefillPattern::kAShape;
      head.a_shape = {options.sizes.sink, options.sizes.recent};
      layer.decode[static_cast<size_t>(h)] = DecodeRole::kStreamingHead;
    }
  }
  MP_RETURN_IF_ERROR(
      ValidateAttentionPolicy(out.policy, gates.num_layers, gates.num_kv_heads, what));
  return out;
}

}  // namespace millipede
