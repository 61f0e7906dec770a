// Engine::SelectHeavyHitters: the static-eviction baseline's choice of keys (H2O-style), made
// once per layer at the end of a sharded step and exact under context parallelism.
//
// The last `observed_queries` positions of the step score every key: score(key, g) is the sum,
// over those queries and the query heads of KV head g, of the softmax probability the query
// gives the key — normalised over every rank's keys (the ranks exchange per-query log-sum-exps).
// Each KV head then keeps its `keep_tokens` best keys over all ranks (ties to the earlier
// position): the ranks exchange their local best candidates and agree on the cut.
//
// The CPU backend only (its tensors are host memory); SetPolicy refuses the role elsewhere.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/float_rows.h"
#include "worker/engine.h"

namespace millipede {
namespace {

// A key's rank in the selection: higher score first, then the earlier position.
struct Candidate {
  double score = -1;
  double position = -1;  // -1: padding
  bool Beats(const Candidate& o) const {
    return score != o.score ? score > o.score : position < o.position;
  }
};

}  // namespace

Status Engine::SelectHeavyHitters(int64_t layer, const std::vector<TokenRange>& q_ranges,
                                  const std::vector<TokenRange>& row_ranges, int64_t rows,
                                  int64_t global_end) {
  MP_ASSERT(backend_->kind() == BackendKind::kCpu, "static eviction runs on the CPU backend");
  const ModelConfig& c = config_;
  Communicator& comm = *comm_;
  const int num_ranks = comm.size();
  const int64_t heads = c.num_attention_heads, kv_heads = c.num_key_value_heads,
                d = c.head_dim, group = heads / kv_heads;
  const StaticEvictionParams& params = policy().static_eviction;
  const int64_t obs = std::min(params.observed_queries, global_end);
  const int64_t obs_begin = global_end - obs;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));

  // 1. Every rank gets the observed queries [obs, heads, d] (each held by one rank).
  const size_t q_floats = static_cast<size_t>(obs * heads * d);
  std::vector<float> mine(q_floats, 0.0f), all(q_floats * static_cast<size_t>(num_ranks));
  const float* q_host = q_.cview().as<const float>();
  int64_t q_row = 0;
  for (const TokenRange& r : q_ranges) {
    for (int64_t p = r.begin; p < r.end; ++p, ++q_row)
      if (p >= obs_begin)
        std::copy_n(q_host + q_row * heads * d, heads * d,
                    mine.data() + (p - obs_begin) * heads * d);
  }
  if (num_ranks > 1) {
    MP_RETURN_IF_ERROR(comm.HostAllGather(mine.data(), all.data(), q_floats * sizeof(float)));
    std::fill(mine.begin(), mine.end(), 0.0f);
    for (int r = 0; r < num_ranks; ++r)
      for (size_t i = 0; i < q_floats; ++i) mine[i] += all[static_cast<size_t>(r) * q_floats + i];
  }
  const std::vector<float>& q = mine;

  // Local keys as floats, [rows, kv_heads, d], with their positions.
  std::vector<float> keys(static_cast<size_t>(rows * kv_heads * d));
  const ConstTensorView k = kv_->Keys(layer, rows);
  if (rows > 0) LoadFloatRow(k.data, k.dtype, 0, rows * kv_heads * d, keys.data());
  std::vector<int64_t> positions;
  for (const TokenRange& r : row_ranges)
    for (int64_t p = r.begin; p < r.end && static_cast<int64_t>(positions.size()) < rows; ++p)
      positions.push_back(p);
  MP_ASSERT(static_cast<int64_t>(positions.size()) == rows, "row positions cover the rows");
  auto dot = [&](int64_t t, int64_t h, int64_t row) {
    const float* qv = q.data() + (t * heads + h) * d;
    const float* kv = keys.data() + (row * kv_heads + h / group) * d;
    double s = 0;
    for (int64_t i = 0; i < d; ++i) s += static_cast<double>(qv[i]) * kv[i];
    return s * scale;
  };

  // 2. Log-sum-exp of every (query, head) over its visible keys, local then over all ranks.
  const size_t n_lse = static_cast<size_t>(obs * heads);
  std::vector<double> lse(n_lse, -std::numeric_limits<double>::infinity());
  for (int64_t t = 0; t < obs; ++t)
    for (int64_t h = 0; h < heads; ++h) {
      double m = -std::numeric_limits<double>::infinity(), sum = 0;
      for (int64_t row = 0; row < rows; ++row)
        if (positions[row] <= obs_begin + t) m = std::max(m, dot(t, h, row));
      if (std::isinf(m)) continue;
      for (int64_t row = 0; row < rows; ++row)
        if (positions[row] <= obs_begin + t) sum += std::exp(dot(t, h, row) - m);
      lse[static_cast<size_t>(t * heads + h)] = m + std::log(sum);
    }
  if (num_ranks > 1) {
    std::vector<double> gathered(n_lse * static_cast<size_t>(num_ranks));
    MP_RETURN_IF_ERROR(comm.HostAllGather(lse.data(), gathered.data(), n_lse * sizeof(double)));
    for (size_t i = 0; i < n_lse; ++i) {
      double m = -std::numeric_limits<double>::infinity(), sum = 0;
      for (int r = 0; r < num_ranks; ++r) m = std::max(m, gathered[r * n_lse + i]);
      if (!std::isinf(m))
        for (int r = 0; r < num_ranks; ++r) sum += std::exp(gathered[r * n_lse + i] - m);
      lse[i] = std::isinf(m) ? m : m + std::log(sum);
    }
  }

  // 3. Scores of the local keys, and each KV head's local best `keep` candidates.
  const int64_t keep = params.keep_tokens;
  std::vector<double> score(static_cast<size_t>(rows * kv_heads), 0.0);
  for (int64_t t = 0; t < obs; ++t)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t row = 0; row < rows; ++row)
        if (positions[row] <= obs_begin + t)
          score[static_cast<size_t>(row * kv_heads + h / group)] +=
              std::exp(dot(t, h, row) - lse[static_cast<size_t>(t * heads + h)]);
  const size_t cands = static_cast<size_t>(kv_heads * keep);
  std::vector<Candidate> local(cands);
  for (int64_t g = 0; g < kv_heads; ++g) {
    std::vector<Candidate> c_g;
    for (int64_t row = 0; row < rows; ++row)
      c_g.push_back({score[static_cast<size_t>(row * kv_heads + g)],
                     static_cast<double>(positions[row])});
    const size_t n = std::min<size_t>(c_g.size(), static_cast<size_t>(keep));
    std::partial_sort(c_g.begin(), c_g.begin() + n, c_g.end(),
                      [](const Candidate& a, const Candidate& b) { return a.Beats(b); });
    std::copy_n(c_g.begin(), n, local.begin() + g * keep);
  }

  // 4. The cut per head: the keep-th best candidate over all ranks.
  std::vector<Candidate> pool = local;
  if (num_ranks > 1) {
    pool.resize(cands * static_cast<size_t>(num_ranks));
    MP_RETURN_IF_ERROR(comm.HostAllGather(local.data(), pool.data(), cands * sizeof(Candidate)));
  }
  if (heavy_.size() < static_cast<size_t>(c.num_hidden_layers))
    heavy_.resize(static_cast<size_t>(c.num_hidden_layers));
  std::vector<uint8_t>& heavy = heavy_[static_cast<size_t>(layer)];
  heavy.assign(static_cast<size_t>(kv_->capacity() * kv_heads), 0);
  for (int64_t g = 0; g < kv_heads; ++g) {
    std::vector<Candidate> best;
    for (int r = 0; r < std::max(num_ranks, 1); ++r)
      for (int64_t i = 0; i < keep; ++i) {
        const Candidate& x = pool[r * cands + static_cast<size_t>(g * keep + i)];
        if (x.position >= 0) best.push_back(x);
      }
    const size_t n = std::min<size_t>(best.size(), static_cast<size_t>(keep));
    if (n == 0) continue;
    std::nth_element(best.begin(), best.begin() + (n - 1), best.end(),
                     [](const Candidate& a, const Candidate& b) { return a.Beats(b); });
    const Candidate cut = best[n - 1];
    for (int64_t row = 0; row < rows; ++row) {
      const Candidate x{score[static_cast<size_t>(row * kv_heads + g)],
                        static_cast<double>(positions[row])};
      if (!cut.Beats(x)) heavy[static_cast<size_t>(row * kv_heads + g)] = 1;
    }
  }
  return OkStatus();
}

}  // namespace millipede
