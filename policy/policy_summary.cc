#include "policy/policy_summary.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "policy/pattern_table.h"

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

// A pattern's or role's parameters as " name value" pairs (" top_k 4096").
template <typename Owner>
std::string DescribeParams(const std::vector<PolicyParam<Owner>>& params, const Owner& owner) {
  std::string s;
  for (const PolicyParam<Owner>& p : params) {
    s.append(" ").append(p.name).append(" ").append(std::to_string(p.read(owner)));
  }
  return s;
}

// Prefill codes: "D" for dense, a letter and a number per distinct parameter set of the other
// patterns ("V1", "V2", "A1", "B1"), numbered in order of first appearance.
class PrefillCodes {
 public:
  std::string Code(const HeadPrefillPolicy& head) {
    const PrefillPatternFacts& facts = *FindPatternFacts(head.pattern);
    if (facts.params.empty()) return std::string(1, facts.code);
    const std::string key = facts.name + DescribeParams(facts.params, head);
    auto it = codes_.find(key);
    if (it != codes_.end()) return it->second;
    const std::string code = facts.code + std::to_string(++counts_[head.pattern]);
    codes_[key] = code;
    legend_.push_back(code + " " + key);
    return code;
  }
  const std::vector<std::string>& legend() const { return legend_; }

 private:
  std::map<std::string, std::string> codes_;
  std::map<PrefillPattern, int> counts_;
  std::vector<std::string> legend_;
};

// A decode role with the model-wide parameters it runs with.
std::string DecodeLegend(DecodeRole r, const AttentionPolicy& p) {
  const DecodeRoleFacts& facts = *FindRoleFacts(r);
  return std::string(1, facts.code) + " " + facts.name + DescribeParams(facts.params, p);
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
  const PrefillPatternFacts* facts = FindPatternFacts(head.pattern);
  if (facts == nullptr || facts->key_budget == nullptr) return CausalPairs(length);
  return BudgetPairs(facts->key_budget(head), length);
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
                    std::to_string(policy.dense_below_tokens) +
                    (policy.fp8_attention ? "; fp8 attention in prefill" : "") + "\n";
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
      decode += std::string(1, FindRoleFacts(r)->code) + " ";
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
