#include "policy/policy_summary.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace millipede {
namespace {

// Sum over positions p in [0, length) of min(p + 1, budget).
double BudgetPairs(int64_t budget, int64_t length) {
  const double n = static_cast<double>(length);
  if (budget >= length) return n * (n + 1) / 2;
  const double c = static_cast<double>(budget);
  return c * (c + 1) / 2 + (n - c) * c;
}

std::string Percent(double share) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%8.3f%%", 100 * share);
  return buffer;
}

// Prefill codes: "D" for dense, a letter and a number per distinct parameter set of the other
// patterns ("V1", "V2", "A1", "B1"), numbered in order of first appearance.
class PrefillCodes {
 public:
  std::string Code(const HeadPrefillPolicy& head) {
    if (head.pattern == PrefillPattern::kDense) return "D";
    const std::string params = Params(head);
    const std::string key = std::string(PrefillPatternName(head.pattern)) + " " + params;
    auto it = codes_.find(key);
    if (it != codes_.end()) return it->second;
    const std::string code = Letter(head.pattern) + std::to_string(++counts_[head.pattern]);
    codes_[key] = code;
    legend_.push_back(code + " " + key);
    return code;
  }
  const std::vector<std::string>& legend() const { return legend_; }

 private:
  static std::string Letter(PrefillPattern p) {
    switch (p) {
      case PrefillPattern::kAShape:
        return "A";
      case PrefillPattern::kVerticalSlash:
        return "V";
      case PrefillPattern::kBlockSparse:
        return "B";
      case PrefillPattern::kDense:
        break;
    }
    return "D";
  }
  static std::string Params(const HeadPrefillPolicy& h) {
    switch (h.pattern) {
      case PrefillPattern::kAShape:
        return "sink_tokens " + std::to_string(h.a_shape.sink_tokens) + " window_tokens " +
               std::to_string(h.a_shape.window_tokens);
      case PrefillPattern::kVerticalSlash:
        return "last_queries " + std::to_string(h.vertical_slash.last_queries) + " vertical " +
               std::to_string(h.vertical_slash.vertical) + " slash " +
               std::to_string(h.vertical_slash.slash);
      case PrefillPattern::kBlockSparse:
        return "block " + std::to_string(h.block_sparse.block) + " top_blocks " +
               std::to_string(h.block_sparse.top_blocks);
      case PrefillPattern::kDense:
        break;
    }
    return "";
  }

  std::map<std::string, std::string> codes_;
  std::map<PrefillPattern, int> counts_;
  std::vector<std::string> legend_;
};

const char* DecodeCode(DecodeRole r) {
  switch (r) {
    case DecodeRole::kFull:
      return "F";
    case DecodeRole::kFilter:
      return "L";
    case DecodeRole::kSelected:
      return "O";
    case DecodeRole::kStreamingHead:
      return "S";
    case DecodeRole::kStaticEviction:
      return "E";
  }
  return "?";
}

// A decode role with the model-wide parameters it runs with.
std::string DecodeLegend(DecodeRole r, const AttentionPolicy& p) {
  std::string s = std::string(DecodeCode(r)) + " " + DecodeRoleName(r);
  switch (r) {
    case DecodeRole::kFilter:
      return s + " top_k " + std::to_string(p.filter.top_k);
    case DecodeRole::kStreamingHead:
      return s + " sink_tokens " + std::to_string(p.streaming_head.sink_tokens) +
             " window_tokens " + std::to_string(p.streaming_head.window_tokens);
    case DecodeRole::kStaticEviction:
      return s + " keep_tokens " + std::to_string(p.static_eviction.keep_tokens) +
             " recent_tokens " + std::to_string(p.static_eviction.recent_tokens) +
             " observed_queries " + std::to_string(p.static_eviction.observed_queries);
    case DecodeRole::kFull:
    case DecodeRole::kSelected:
      break;
  }
  return s;
}

std::string PadLeft(const std::string& s, size_t width) {
  return std::string(width > s.size() ? width - s.size() : 0, ' ') + s;
}

std::string PadRight(const std::string& s, size_t width) {
  return s + std::string(width > s.size() ? width - s.size() : 0, ' ');
}

}  // namespace

double CausalPairs(int64_t length) {
  const double n = static_cast<double>(length);
  return n * (n + 1) / 2;
}

double ExpectedPrefillPairs(const HeadPrefillPolicy& head, int64_t length) {
  if (length <= 0) return 0;
  switch (head.pattern) {
    case PrefillPattern::kDense:
      return CausalPairs(length);
    case PrefillPattern::kAShape:
      return BudgetPairs(head.a_shape.sink_tokens + head.a_shape.window_tokens, length);
    case PrefillPattern::kVerticalSlash:
      return BudgetPairs(head.vertical_slash.vertical + head.vertical_slash.slash, length);
    case PrefillPattern::kBlockSparse:
      return BudgetPairs(head.block_sparse.top_blocks * head.block_sparse.block, length);
  }
  return CausalPairs(length);
}

PolicyDensity ExpectedDensity(const AttentionPolicy& policy, int64_t length) {
  PolicyDensity d;
  d.dense_fallback = length < policy.dense_below_tokens;
  const double causal = CausalPairs(length);
  double sum = 0;
  int64_t heads = 0;
  for (const LayerPolicy& layer : policy.layers) {
    double layer_sum = 0;
    for (const HeadPrefillPolicy& head : layer.prefill)
      layer_sum += d.dense_fallback ? 1.0 : ExpectedPrefillPairs(head, length) / causal;
    d.layers.push_back(
        layer.prefill.empty() ? 1.0 : layer_sum / static_cast<double>(layer.prefill.size()));
    sum += layer_sum;
    heads += static_cast<int64_t>(layer.prefill.size());
  }
  d.overall = heads == 0 ? 1.0 : sum / static_cast<double>(heads);
  return d;
}

std::string PolicySummaryTable(const AttentionPolicy& policy, int64_t num_query_heads,
                               int64_t length) {
  const PolicyDensity density = ExpectedDensity(policy, length);
  const size_t num_kv_heads = policy.layers.empty() ? 0 : policy.layers[0].prefill.size();
  PrefillCodes prefill_codes;
  std::vector<std::vector<std::string>> codes(policy.layers.size());
  size_t width = 1;
  for (size_t l = 0; l < policy.layers.size(); ++l) {
    for (const HeadPrefillPolicy& head : policy.layers[l].prefill) {
      codes[l].push_back(prefill_codes.Code(head));
      width = std::max(width, codes[l].back().size());
    }
  }
  std::string out = std::to_string(policy.layers.size()) + " layers x " +
                    std::to_string(num_kv_heads) + " KV heads (" + std::to_string(num_query_heads) +
                    " query heads); dense_below_tokens " +
                    std::to_string(policy.dense_below_tokens) + "\n";
  out += "expected prefill density at " + std::to_string(length) +
         " tokens: the share of the causal query-key pairs (a-shape exact, vertical-slash and "
         "block-sparse upper bounds)\n";
  if (density.dense_fallback) out += "  (below dense_below_tokens: every head runs dense)\n";
  const size_t prefill_width = std::max<size_t>(num_kv_heads * (width + 1), 19) + 2;
  out +=
      "layer   density  " + PadRight("prefill by KV head", prefill_width) + "decode by KV head\n";
  std::map<DecodeRole, bool> roles;
  for (size_t l = 0; l < policy.layers.size(); ++l) {
    std::string prefill, decode;
    for (const std::string& c : codes[l]) prefill += PadLeft(c, width) + " ";
    for (DecodeRole r : policy.layers[l].decode) {
      decode += std::string(DecodeCode(r)) + " ";
      roles[r] = true;
    }
    decode.pop_back();
    out += PadLeft(std::to_string(l), 5) + " " + Percent(density.layers[l]) + "  " +
           PadRight(prefill, prefill_width) + decode + "\n";
  }
  out += PadLeft("all", 5) + " " + Percent(density.overall) + "  (every KV head of the model)\n";
  out += "prefill codes:\n  D dense\n";
  for (const std::string& entry : prefill_codes.legend()) out += "  " + entry + "\n";
  out += "decode codes:\n";
  for (const auto& [role, unused] : roles) out += "  " + DecodeLegend(role, policy) + "\n";
  out += "summary: " + policy.Summary() + "\n";
  return out;
}

}  // namespace millipede
