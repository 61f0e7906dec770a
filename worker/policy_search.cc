#include "worker/policy_search.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <sstream>

#include "policy/policy_summary.h"

namespace millipede {
namespace {

constexpr int64_t kBlock = 64;
constexpr int64_t kLastQueries = 64;
constexpr int64_t kStride = 8;  // the antidiagonal candidates' stride

// The largest x in [1, hi] whose pairs stay within `target` (1 when none does); pairs(x) grows
// with x.
int64_t LargestFitting(int64_t hi, double target, const std::function<double(int64_t)>& pairs) {
  int64_t lo = 1;
  if (pairs(1) > target) return 1;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (pairs(mid) <= target) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

HeadPrefillPolicy AShape(int64_t sink, int64_t window) {
  HeadPrefillPolicy h;
  h.pattern = PrefillPattern::kAShape;
  h.a_shape = {sink, window};
  return h;
}
HeadPrefillPolicy BlockSparse(int64_t top_blocks) {
  HeadPrefillPolicy h;
  h.pattern = PrefillPattern::kBlockSparse;
  h.block_sparse = {kBlock, top_blocks};
  return h;
}
HeadPrefillPolicy Antidiagonal(int64_t mass_permille) {
  HeadPrefillPolicy h;
  h.pattern = PrefillPattern::kAntidiagonal;
  h.antidiagonal = {kBlock, kStride, mass_permille};
  return h;
}
HeadPrefillPolicy VerticalSlash(int64_t vertical, int64_t slash) {
  HeadPrefillPolicy h;
  h.pattern = PrefillPattern::kVerticalSlash;
  h.vertical_slash = {kLastQueries, vertical, slash};
  return h;
}

// Relative squared error of each KV head's query heads: o and dense are [rows, heads * head_dim].
std::vector<double> HeadErrors(const std::vector<float>& o, const std::vector<float>& dense,
                               const ModelConfig& c) {
  const int64_t heads = c.num_attention_heads, group = heads / c.num_key_value_heads;
  const int64_t width = heads * c.head_dim, rows = static_cast<int64_t>(dense.size()) / width;
  std::vector<double> err(static_cast<size_t>(c.num_key_value_heads), 0.0),
      norm(static_cast<size_t>(c.num_key_value_heads), 0.0);
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t d = 0; d < c.head_dim; ++d) {
        const size_t i = static_cast<size_t>(t * width + h * c.head_dim + d);
        const double diff = static_cast<double>(o[i]) - dense[i];
        err[static_cast<size_t>(h / group)] += diff * diff;
        norm[static_cast<size_t>(h / group)] += static_cast<double>(dense[i]) * dense[i];
      }
  for (size_t g = 0; g < err.size(); ++g) err[g] = norm[g] > 0 ? err[g] / norm[g] : err[g];
  return err;
}

// The engine and what its observer captured.
class SearchRun {
 public:
  static StatusOr<std::unique_ptr<SearchRun>> Create(EngineOptions options) {
    auto run = std::unique_ptr<SearchRun>(new SearchRun());
    SearchRun* self = run.get();
    options.attention_observer = [self](int64_t layer, ConstTensorView o) {
      self->Observe(layer, o);
    };
    MP_ASSIGN_OR_RETURN(run->engine_, Engine::Create(options, nullptr));
    run->outputs_.resize(static_cast<size_t>(run->engine_->config().num_hidden_layers));
    return run;
  }
  Engine& engine() { return *engine_; }

  // Prefills `prompt` under `policy` and returns the attention output of layer `layer` (every
  // layer's with -1, the run then going through the whole model; else it stops after `layer`).
  StatusOr<std::vector<std::vector<float>>> Run(const AttentionPolicy& policy,
                                                std::span<const int32_t> prompt, int64_t layer) {
    for (auto& o : outputs_) o.clear();
    capture_ = layer;
    observed_ = OkStatus();
    const int64_t n = static_cast<int64_t>(prompt.size());
    MP_RETURN_IF_ERROR(engine_->StartSequence(kSequence, SequenceOptions{n, n, policy}));
    StepPlan plan;
    plan.steps.push_back({kSequence, StepKind::kPrefill, {{0, n}}, {prompt.begin(), prompt.end()}});
    auto keep_going = [layer](int64_t done, int64_t) { return layer < 0 || done <= layer; };
    StatusOr<StepOutput> out = engine_->RunStep(plan, keep_going);
    engine_->EndSequence(kSequence);
    // Stopping after the layer cancels the step: expected unless it was the last layer.
    if (!out.ok() && !(layer >= 0 && out.status().code() == StatusCode::kCancelled))
      return out.status();
    if (out.ok()) prefill_ = out->prefill[0];
    MP_RETURN_IF_ERROR(observed_);
    return outputs_;
  }
  // The prefill attention pairs of the latest Run that went through every layer.
  const PrefillDensity& prefill_density() const { return prefill_; }

 private:
  SearchRun() = default;
  void Observe(int64_t layer, ConstTensorView o) {
    if (!observed_.ok() || (capture_ >= 0 && layer != capture_)) return;
    std::vector<float>& host = outputs_[static_cast<size_t>(layer)];
    host.resize(static_cast<size_t>(o.NumElements()));
    observed_ = engine_->backend().CopyToHost(o, {host.data(), DType::kF32, o.shape});
  }

  // The one sequence a run prefills.
  static constexpr SequenceId kSequence = 1;

  std::unique_ptr<Engine> engine_;
  std::vector<std::vector<float>> outputs_;  // [layer] [rows * heads * head_dim]
  PrefillDensity prefill_;
  int64_t capture_ = -1;
  Status observed_;
};

// The candidate's name from its sizes.
std::string CandidateName(const HeadPrefillPolicy& h) {
  switch (h.pattern) {
    case PrefillPattern::kAShape:
      return "a-shape " + std::to_string(h.a_shape.sink_tokens) + "+" +
             std::to_string(h.a_shape.window_tokens);
    case PrefillPattern::kBlockSparse:
      return "block-sparse top " + std::to_string(h.block_sparse.top_blocks);
    case PrefillPattern::kVerticalSlash:
      return "vertical-slash " + std::to_string(h.vertical_slash.vertical) + "/" +
             std::to_string(h.vertical_slash.slash);
    case PrefillPattern::kAntidiagonal:
      return "antidiagonal mass " + std::to_string(h.antidiagonal.mass_permille) + "/1000";
    case PrefillPattern::kDense:
      break;
  }
  return "dense";
}

// `x` scaled by f, in [1, hi].
int64_t Scaled(int64_t x, double f, int64_t hi) {
  return std::clamp<int64_t>(static_cast<int64_t>(static_cast<double>(x) * f + 0.5), 1, hi);
}

// Tunes a vertical-slash, block-sparse or antidiagonal candidate to the budget by the pairs its
// index really covers on the reference prompt (every layer and head under it; what the sparse
// kernel computes), where the cost model only bounds them: up to four rounds of scaling its sizes
// by budget / measured (an antidiagonal candidate's density is no proportion of its mass
// threshold: up to eight rounds of bisection on the threshold), stopping within 10% of the budget
// or when the sizes stop changing; the candidate keeps the sizes measured closest to the budget.
// A-shape's pairs are exact.
Status CalibrateCandidate(SearchRun& run, std::span<const int32_t> prompt,
                          const AttentionPolicy& dense, double budget, SearchCandidate& cand) {
  const int64_t n = static_cast<int64_t>(prompt.size());
  HeadPrefillPolicy h = cand.head;
  const bool bisect = h.pattern == PrefillPattern::kAntidiagonal;
  int64_t lo = 0, hi = 1000;  // the threshold's bracket (bisect)
  for (int round = 0; round < (bisect ? 8 : 4); ++round) {
    AttentionPolicy p = dense;
    for (LayerPolicy& layer : p.layers) layer.prefill.assign(layer.prefill.size(), h);
    MP_RETURN_IF_ERROR(run.Run(p, prompt, -1).status());
    const PrefillDensity d = run.prefill_density();
    const double measured = d.causal_pairs > 0 ? static_cast<double>(d.attended_pairs) /
                                                     static_cast<double>(d.causal_pairs)
                                               : 1.0;
    if (cand.measured_density < 0 ||
        std::abs(measured - budget) < std::abs(cand.measured_density - budget)) {
      cand.head = h;
      cand.measured_density = measured;
    }
    if (measured <= 0 || std::abs(measured - budget) <= 0.1 * budget) break;
    const double f = budget / measured;
    const HeadPrefillPolicy before = h;
    if (bisect) {
      (measured > budget ? hi : lo) = h.antidiagonal.mass_permille;
      h.antidiagonal.mass_permille = std::max<int64_t>(1, (lo + hi) / 2);
    } else if (h.pattern == PrefillPattern::kBlockSparse) {
      h.block_sparse.top_blocks = Scaled(h.block_sparse.top_blocks, f, (n + kBlock - 1) / kBlock);
    } else {
      h.vertical_slash.vertical = Scaled(h.vertical_slash.vertical, f, n);
      h.vertical_slash.slash = Scaled(h.vertical_slash.slash, f, n);
    }
    if (h == before) break;
  }
  cand.name = CandidateName(cand.head);
  return OkStatus();
}

}  // namespace

StatusOr<std::vector<SearchCandidate>> SearchCandidates(int64_t length,
                                                        const PolicySearchOptions& options) {
  MP_REQUIRE(length >= 1, "search: the prompt is empty");
  MP_REQUIRE(options.budget > 0 && options.budget <= 1, "search: the budget ", options.budget,
             " must lie in (0, 1]");
  MP_REQUIRE(options.sink_tokens >= 1, "search: the a-shape sinks must be positive, got ",
             options.sink_tokens);
  const double target = options.budget * CausalPairs(length);
  auto pairs = [length](const HeadPrefillPolicy& h) { return ExpectedPrefillPairs(h, length); };
  std::vector<SearchCandidate> out;
  const int64_t sink = options.sink_tokens;
  const int64_t window =
      LargestFitting(length, target, [&](int64_t w) { return pairs(AShape(sink, w)); });
  out.push_back({CandidateName(AShape(sink, window)), AShape(sink, window)});
  const int64_t top = LargestFitting((length + kBlock - 1) / kBlock, target,
                                     [&](int64_t t) { return pairs(BlockSparse(t)); });
  out.push_back({CandidateName(BlockSparse(top)), BlockSparse(top)});
  // Keys per query the budget allows (columns and diagonals together).
  const int64_t keys =
      1 + LargestFitting(length, target, [&](int64_t k) { return pairs(VerticalSlash(1, k)); });
  for (const int64_t share : {8, 2}) {
    const int64_t vertical = std::max<int64_t>(1, keys / share);
    const int64_t slash = std::max<int64_t>(1, keys - vertical);
    out.push_back({CandidateName(VerticalSlash(vertical, slash)), VerticalSlash(vertical, slash)});
  }
  // The mass threshold has no closed-form cost: a start that the calibration bisects.
  const HeadPrefillPolicy antidiagonal = Antidiagonal(options.budget >= 1 ? 1000 : 900);
  out.push_back({CandidateName(antidiagonal), antidiagonal});
  return out;
}

StatusOr<PolicySearchResult> SearchPolicy(EngineOptions engine_options,
                                          std::span<const int32_t> prompt,
                                          const PolicySearchOptions& options) {
  const int64_t n = static_cast<int64_t>(prompt.size());
  MP_REQUIRE(n >= kLastQueries, "search: the reference prompt has ", n,
             " tokens; give at least ", kLastQueries);
  PolicySearchResult result;
  MP_ASSIGN_OR_RETURN(result.candidates, SearchCandidates(n, options));
  MP_ASSIGN_OR_RETURN(std::unique_ptr<SearchRun> run, SearchRun::Create(std::move(engine_options)));
  const ModelConfig& c = run->engine().config();
  const int64_t layers = c.num_hidden_layers, kv_heads = c.num_key_value_heads;
  const AttentionPolicy dense = DensePolicy(layers, kv_heads);
  // Which candidates this engine runs (a pattern its backend lacks is refused up front).
  bool any = false;
  for (SearchCandidate& cand : result.candidates) {
    AttentionPolicy p = dense;
    p.layers[0].prefill.assign(static_cast<size_t>(kv_heads), cand.head);
    const Status s = run->engine().CheckPolicy(p);
    if (!s.ok() && s.code() != StatusCode::kUnimplemented) return s;
    cand.runnable = s.ok();
    any = any || cand.runnable;
  }
  MP_REQUIRE(any, "search: this engine runs none of the candidate patterns");
  for (SearchCandidate& cand : result.candidates)
    if (cand.runnable && cand.head.pattern != PrefillPattern::kAShape)
      MP_RETURN_IF_ERROR(CalibrateCandidate(*run, prompt, dense, options.budget, cand));
  MP_ASSIGN_OR_RETURN(const std::vector<std::vector<float>> reference, run->Run(dense, prompt, -1));

  result.policy = dense;
  result.policy.dense_below_tokens = options.dense_below_tokens;
  const size_t num_candidates = result.candidates.size();
  for (int64_t l = 0; l < layers; ++l) {
    auto& errors = result.errors.emplace_back(
        num_candidates, std::vector<double>(static_cast<size_t>(kv_heads), 0.0));
    for (size_t k = 0; k < num_candidates; ++k) {
      if (!result.candidates[k].runnable) continue;
      AttentionPolicy p = dense;
      p.layers[static_cast<size_t>(l)].prefill.assign(static_cast<size_t>(kv_heads),
                                                      result.candidates[k].head);
      MP_ASSIGN_OR_RETURN(const std::vector<std::vector<float>> out, run->Run(p, prompt, l));
      errors[k] = HeadErrors(out[static_cast<size_t>(l)], reference[static_cast<size_t>(l)], c);
    }
    auto& chosen = result.chosen.emplace_back();
    for (int64_t g = 0; g < kv_heads; ++g) {
      int best = -1;
      for (size_t k = 0; k < num_candidates; ++k)
        if (result.candidates[k].runnable &&
            (best < 0 || errors[k][static_cast<size_t>(g)] <
                             errors[static_cast<size_t>(best)][static_cast<size_t>(g)]))
          best = static_cast<int>(k);
      chosen.push_back(best);
      result.policy.layers[static_cast<size_t>(l)].prefill[static_cast<size_t>(g)] =
          result.candidates[static_cast<size_t>(best)].head;
    }
  }
  MP_RETURN_IF_ERROR(ValidateAttentionPolicy(result.policy, layers, kv_heads, "searched policy"));
  return result;
}

std::string PolicySearchReport(const PolicySearchResult& result) {
  std::ostringstream out;
  out << "candidates:";
  for (const SearchCandidate& cand : result.candidates)
    if (!cand.runnable) {
      out << " [" << cand.name << ", not run: the engine lacks it]";
    } else if (cand.measured_density >= 0) {
      char density[32];
      std::snprintf(density, sizeof(density), "%.3f", cand.measured_density);
      out << " [" << cand.name << ", measured density " << density << "]";
    } else {
      out << " [" << cand.name << "]";
    }
  out << "\n";
  for (size_t l = 0; l < result.chosen.size(); ++l) {
    out << "layer " << l << ":";
    for (size_t g = 0; g < result.chosen[l].size(); ++g) {
      const int k = result.chosen[l][g];
      char err[32];
      std::snprintf(err, sizeof(err), "%.2e", result.errors[l][static_cast<size_t>(k)][g]);
      out << "  kv" << g << " " << result.candidates[static_cast<size_t>(k)].name << " (" << err
          << ")";
    }
    out << "\n";
  }
  return out.str();
}

}  // namespace millipede
