#include "worker/attention/static_eviction.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/attention/attention_state.h"
#include "kernels/float_rows.h"

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

// The observation: the last `obs` queries of the step [obs, heads, d], held by their ranks and
// summed over all (each position is held by one rank, the others contribute zeros).
StatusOr<std::vector<float>> ObservedQueries(AttentionEnv& env, const PrefillInput& in,
                                             int64_t obs_begin, int64_t obs) {
  const int64_t width = env.config.num_attention_heads * env.config.head_dim;
  const size_t floats = static_cast<size_t>(obs * width);
  std::vector<float> mine(floats, 0.0f);
  const float* q = in.q.as<const float>();
  int64_t row = 0;
  for (const TokenRange& r : in.q_ranges)
    for (int64_t p = r.begin; p < r.end; ++p, ++row)
      if (p >= obs_begin) std::copy_n(q + row * width, width, mine.data() + (p - obs_begin) * width);
  const int num_ranks = env.comm.size();
  if (num_ranks == 1) return mine;
  std::vector<float> all(floats * static_cast<size_t>(num_ranks));
  MP_RETURN_IF_ERROR(env.comm.HostAllGather(mine.data(), all.data(), floats * sizeof(float)));
  std::fill(mine.begin(), mine.end(), 0.0f);
  for (int r = 0; r < num_ranks; ++r)
    for (size_t i = 0; i < floats; ++i) mine[i] += all[static_cast<size_t>(r) * floats + i];
  return mine;
}

// Scores of one rank's keys against the observation, in double.
class KeyScorer {
 public:
  KeyScorer(const ModelConfig& c, const std::vector<float>& q, std::vector<float> keys,
            std::vector<int64_t> positions, int64_t obs_begin)
      : heads_(c.num_attention_heads), kv_heads_(c.num_key_value_heads), d_(c.head_dim),
        group_(heads_ / kv_heads_), scale_(1.0 / std::sqrt(static_cast<double>(d_))), q_(q),
        keys_(std::move(keys)), positions_(std::move(positions)), obs_begin_(obs_begin) {}
  int64_t rows() const { return static_cast<int64_t>(positions_.size()); }
  int64_t position(int64_t row) const { return positions_[static_cast<size_t>(row)]; }
  bool Sees(int64_t t, int64_t row) const { return position(row) <= obs_begin_ + t; }
  double Dot(int64_t t, int64_t h, int64_t row) const {
    const float* qv = q_.data() + (t * heads_ + h) * d_;
    const float* kv = keys_.data() + (row * kv_heads_ + h / group_) * d_;
    double s = 0;
    for (int64_t i = 0; i < d_; ++i) s += static_cast<double>(qv[i]) * kv[i];
    return s * scale_;
  }
  const int64_t heads_, kv_heads_, d_, group_;

 private:
  const double scale_;
  const std::vector<float>& q_;
  std::vector<float> keys_;
  std::vector<int64_t> positions_;
  int64_t obs_begin_;
};

// log-sum-exp of every (query, head) over every rank's visible keys: local, then merged by the
// project's one merge rule.
StatusOr<std::vector<double>> GlobalLse(AttentionEnv& env, const KeyScorer& s, int64_t obs) {
  const size_t n = static_cast<size_t>(obs * s.heads_);
  std::vector<double> lse(n);
  for (int64_t t = 0; t < obs; ++t)
    for (int64_t h = 0; h < s.heads_; ++h) {
      AttentionStateT<double> state = AttentionStateT<double>::Empty();
      for (int64_t row = 0; row < s.rows(); ++row)
        if (s.Sees(t, row)) state.AddScore(s.Dot(t, h, row));
      lse[static_cast<size_t>(t * s.heads_ + h)] = state.Lse();
    }
  const int num_ranks = env.comm.size();
  if (num_ranks == 1) return lse;
  std::vector<double> all(n * static_cast<size_t>(num_ranks));
  MP_RETURN_IF_ERROR(env.comm.HostAllGather(lse.data(), all.data(), n * sizeof(double)));
  for (size_t i = 0; i < n; ++i) {
    AttentionStateT<double> state = AttentionStateT<double>::Empty();
    for (int r = 0; r < num_ranks; ++r)
      state.Merge(AttentionStateT<double>::FromLse(all[static_cast<size_t>(r) * n + i]));
    lse[i] = state.Lse();
  }
  return lse;
}

}  // namespace

Status StaticEvictionDecode::AfterPrefill(AttentionEnv& env, const PrefillInput& in) {
  MP_REQUIRE(env.backend.kind() == BackendKind::kCpu,
             "static eviction selects keys on the CPU backend only");
  const ModelConfig& c = env.config;
  const int64_t obs = std::min(params_.observed_queries, in.length);
  const int64_t obs_begin = in.length - obs;
  MP_ASSIGN_OR_RETURN(std::vector<float> q, ObservedQueries(env, in, obs_begin, obs));
  MP_ASSIGN_OR_RETURN(const ConstKvRows rows, in.store->Rows(in.step_rows));
  const int64_t n = rows.k.shape.dims[0];
  const int64_t kv_heads = c.num_key_value_heads;
  std::vector<float> keys(static_cast<size_t>(n * kv_heads * c.head_dim));
  if (n > 0) LoadFloatRow(rows.k.data, rows.k.dtype, 0, n * kv_heads * c.head_dim, keys.data());
  std::vector<int64_t> positions;
  for (const TokenRange& r : in.rank_blocks[static_cast<size_t>(env.comm.rank())])
    for (int64_t p = r.begin; p < r.end; ++p) positions.push_back(p);
  MP_ASSERT(static_cast<int64_t>(positions.size()) == n, "block positions cover the rows");
  const KeyScorer scorer(c, q, std::move(keys), std::move(positions), obs_begin);
  MP_ASSIGN_OR_RETURN(std::vector<double> lse, GlobalLse(env, scorer, obs));
  std::vector<double> score(static_cast<size_t>(n * kv_heads), 0.0);
  for (int64_t t = 0; t < obs; ++t)
    for (int64_t h = 0; h < scorer.heads_; ++h)
      for (int64_t row = 0; row < n; ++row)
        if (scorer.Sees(t, row))
          score[static_cast<size_t>(row * kv_heads + h / scorer.group_)] +=
              std::exp(scorer.Dot(t, h, row) - lse[static_cast<size_t>(t * scorer.heads_ + h)]);
  // Each KV head's local best candidates, then the cut over every rank's.
  const int64_t keep = params_.keep_tokens;
  const size_t cands = static_cast<size_t>(kv_heads * keep);
  std::vector<Candidate> local(cands);
  for (int64_t g = 0; g < kv_heads; ++g) {
    std::vector<Candidate> c_g;
    for (int64_t row = 0; row < n; ++row)
      c_g.push_back({score[static_cast<size_t>(row * kv_heads + g)],
                     static_cast<double>(scorer.position(row))});
    const size_t m = std::min<size_t>(c_g.size(), static_cast<size_t>(keep));
    std::partial_sort(c_g.begin(), c_g.begin() + m, c_g.end(),
                      [](const Candidate& a, const Candidate& b) { return a.Beats(b); });
    std::copy_n(c_g.begin(), m, local.begin() + g * keep);
  }
  const int num_ranks = env.comm.size();
  std::vector<Candidate> pool = local;
  if (num_ranks > 1) {
    pool.resize(cands * static_cast<size_t>(num_ranks));
    MP_RETURN_IF_ERROR(
        env.comm.HostAllGather(local.data(), pool.data(), cands * sizeof(Candidate)));
  }
  heavy_.assign(static_cast<size_t>(n * kv_heads), 0);
  for (int64_t g = 0; g < kv_heads; ++g) {
    std::vector<Candidate> best;
    for (int r = 0; r < num_ranks; ++r)
      for (int64_t i = 0; i < keep; ++i) {
        const Candidate& x = pool[r * cands + static_cast<size_t>(g * keep + i)];
        if (x.position >= 0) best.push_back(x);
      }
    const size_t m = std::min<size_t>(best.size(), static_cast<size_t>(keep));
    if (m == 0) continue;
    std::nth_element(best.begin(), best.begin() + (m - 1), best.end(),
                     [](const Candidate& a, const Candidate& b) { return a.Beats(b); });
    const Candidate cut = best[m - 1];
    for (int64_t row = 0; row < n; ++row) {
      const Candidate x{score[static_cast<size_t>(row * kv_heads + g)],
                        static_cast<double>(scorer.position(row))};
      if (!cut.Beats(x)) heavy_[static_cast<size_t>(row * kv_heads + g)] = 1;
    }
  }
  return OkStatus();
}

Status StaticEvictionDecode::Partial(AttentionEnv& env, const DecodeInput& in, TensorView o,
                                     TensorView lse) {
  // Heavy hitters chosen after prefill, plus the most recent positions. Without a prefill that
  // chose them no key is a heavy hitter.
  const int64_t kv_heads = env.config.num_key_value_heads;
  MP_ASSIGN_OR_RETURN(const ConstKvRows rows, in.store->Rows(in.step_rows));
  const int64_t n = rows.k.shape.dims[0];
  std::vector<uint8_t> visible(static_cast<size_t>(std::max<int64_t>(n, 1) * kv_heads), 0);
  const int64_t recent_from = in.position - params_.recent_tokens + 1;
  std::vector<TokenRange> ranges = in.store->held_ranges();
  if (in.step_rows > 0) ranges.push_back({in.position, in.position + 1});
  int64_t row = 0;
  for (const TokenRange& r : ranges)
    for (int64_t p = r.begin; p < r.end; ++p, ++row)
      for (int64_t g = 0; g < kv_heads; ++g) {
        const size_t i = static_cast<size_t>(row * kv_heads + g);
        visible[i] = (p >= recent_from || (i < heavy_.size() && heavy_[i] != 0)) ? 1 : 0;
      }
  AttentionArgs a;
  a.q = in.q;
  a.k = rows.k;
  a.v = rows.v;
  a.q_offset = in.position;
  a.mask = AttentionMask::kNone;
  a.kv_row_visible = visible.data();
  a.o = o;
  a.lse = lse;
  return env.backend.Attention(a);
}

}  // namespace millipede
