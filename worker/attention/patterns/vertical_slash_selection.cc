// The vertical-slash heads' selection (vertical_slash_pattern.h): the step's last queries'
// scores of each rank's keys by column and by diagonal, one global top-k per column budget,
// diagonal scores summed over ranks.
#include <algorithm>
#include <limits>
#include <numeric>

#include "worker/attention/patterns/vertical_slash_pattern.h"
#include "worker/attention/scratch_buffer.h"
#include "worker/attention/sparse_prefill_scratch.h"
#include "worker/dist/global_top_k.h"

namespace millipede {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Where row `row` of keys held as `ranges` (increasing) sits: `starts` holds each range's first
// row.
int64_t PositionOfRow(std::span<const TokenRange> ranges, std::span<const int64_t> starts,
                      int64_t row) {
  const size_t r =
      static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), row) - starts.begin()) - 1;
  return ranges[r].begin + (row - starts[r]);
}

// Selections [rows][...] packed into [rows, width] with -1 padding.
std::vector<int64_t> Pack(const std::vector<std::vector<int64_t>>& rows, int64_t* width) {
  *width = 0;
  for (const auto& r : rows) *width = std::max<int64_t>(*width, static_cast<int64_t>(r.size()));
  std::vector<int64_t> out(rows.size() * static_cast<size_t>(*width), -1);
  for (size_t g = 0; g < rows.size(); ++g)
    std::copy(rows[g].begin(), rows[g].end(), out.begin() + static_cast<int64_t>(g) * *width);
  return out;
}

}  // namespace

StatusOr<std::vector<std::vector<int64_t>>> VerticalSlashHeads::SelectColumns(
    AttentionEnv& env, ConstTensorView scores, std::span<const TokenRange> ranges) {
  Backend& b = env.backend;
  const int64_t kv_heads = static_cast<int64_t>(heads_.size()), n_k = scores.dim(1);
  const int64_t length = std::max<int64_t>(1, n_k);
  std::vector<int64_t> budget(heads_.size(), 0);
  for (size_t g = 0; g < heads_.size(); ++g)
    if (heads_[g].pattern == PrefillPattern::kVerticalSlash)
      budget[g] = heads_[g].vertical_slash.vertical;
  const int64_t k = std::min(*std::max_element(budget.begin(), budget.end()), length);
  MP_ASSIGN_OR_RETURN(const HostTopK top,
                      TopKToHost(b, scores, k, &env.sparse.vs_top_index, &env.sparse.vs_top_value));
  // Rows map to positions through the ranges (a million keys need no list of positions).
  std::vector<int64_t> starts;
  int64_t rows = 0;
  for (const TokenRange& r : ranges) {
    starts.push_back(rows);
    rows += r.size();
  }
  std::vector<std::vector<int64_t>> selected(heads_.size());
  std::vector<int64_t> distinct = budget;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  for (int64_t v : distinct) {
    if (v == 0) continue;
    // One global cut per budget: the heads with this budget, the others without candidates.
    std::vector<GlobalTopKCandidate> candidates;
    std::vector<int64_t> offsets = {0};
    for (int64_t g = 0; g < kv_heads; ++g) {
      if (budget[g] == v) {
        const int64_t forced = std::min(kForcedColumns, v);
        for (const TokenRange& r : ranges)
          for (int64_t p = r.begin; p < std::min(r.end, forced); ++p)
            candidates.push_back({kInf, p});
        for (int64_t i = 0; i < k; ++i) {
          const int32_t row = top.index[static_cast<size_t>(g * k + i)];
          if (row < 0) break;
          const int64_t p = PositionOfRow(ranges, starts, row);
          if (p >= forced) candidates.push_back({top.value[static_cast<size_t>(g * k + i)], p});
        }
      }
      offsets.push_back(static_cast<int64_t>(candidates.size()));
    }
    MP_ASSIGN_OR_RETURN(GlobalTopKResult cut, GlobalTopK(env.comm, candidates, offsets, v));
    for (int64_t g = 0; g < kv_heads; ++g)
      if (budget[g] == v) selected[g] = std::move(cut.kept_positions[static_cast<size_t>(g)]);
  }
  return selected;
}

StatusOr<std::vector<std::vector<int64_t>>> VerticalSlashHeads::SelectDiagonals(
    AttentionEnv& env, ConstTensorView diag) {
  Backend& b = env.backend;
  const int64_t kv_heads = diag.dim(0), length = diag.dim(1);
  int64_t k = 0;
  for (const HeadPrefillPolicy& h : heads_)
    if (h.pattern == PrefillPattern::kVerticalSlash)
      k = std::max(k, std::min(h.vertical_slash.slash, length));
  MP_ASSIGN_OR_RETURN(const HostTopK top,
                      TopKToHost(b, diag, k, &env.sparse.vs_top_index, &env.sparse.vs_top_value));
  std::vector<std::vector<int64_t>> selected(heads_.size());
  for (int64_t g = 0; g < kv_heads; ++g) {
    const HeadPrefillPolicy& h = heads_[static_cast<size_t>(g)];
    if (h.pattern != PrefillPattern::kVerticalSlash) continue;
    // The nearest diagonals first (diagonal 0 among them: every query sees itself), then the
    // best scored others, up to the budget. The scores agree on every rank (summed over ranks).
    const int64_t budget = std::min(h.vertical_slash.slash, length);
    const int64_t forced = std::min(kForcedDiagonals, budget);
    std::vector<int64_t>& s = selected[static_cast<size_t>(g)];
    for (int64_t d = 0; d < forced; ++d) s.push_back(d);
    for (int64_t i = 0; i < k && static_cast<int64_t>(s.size()) < budget; ++i) {
      const int32_t d = top.index[static_cast<size_t>(g * k + i)];
      if (d < 0) break;
      if (d >= forced) s.push_back(d);
    }
    std::sort(s.begin(), s.end());
  }
  return selected;
}

Status VerticalSlashHeads::Plan(AttentionEnv& env, const PrefillInput& in, ConstKvRows mine,
                                std::span<const TokenRange> mine_ranges) {
  Backend& b = env.backend;
  const int64_t kv_heads = static_cast<int64_t>(heads_.size());
  // The layer's vertical-slash heads observe the same last queries: the most any of them asks
  // for, within this step's queries.
  int64_t observe = 1;
  for (const HeadPrefillPolicy& h : heads_)
    if (h.pattern == PrefillPattern::kVerticalSlash)
      observe = std::max(observe, h.vertical_slash.last_queries);
  observe = std::min(observe, in.length - in.step_begin);
  const int64_t begin = in.length - observe;
  MP_ASSIGN_OR_RETURN(ConstTensorView q, observed_.Gather(env, in, begin, observe));
  MP_ASSIGN_OR_RETURN(ConstTensorView lse, observed_.GlobalLse(env, q, begin, mine, mine_ranges));
  std::vector<int64_t> q_positions(static_cast<size_t>(observe));
  std::iota(q_positions.begin(), q_positions.end(), begin);
  MP_ASSIGN_OR_RETURN(TensorView q_pos, UploadI64(b, &env.sparse.vs_q_pos, q_positions));
  const int64_t n_k = TotalSize(mine_ranges);
  // The keys' positions: the same for every layer of a step, uploaded when they change.
  std::vector<TokenRange>& uploaded = env.sparse.vs_k_pos_ranges;
  if (env.sparse.vs_k_pos.view().data == nullptr || !std::ranges::equal(uploaded, mine_ranges)) {
    uploaded.clear();
    MP_RETURN_IF_ERROR(UploadI64(b, &env.sparse.vs_k_pos, RangePositions(mine_ranges)).status());
    uploaded.assign(mine_ranges.begin(), mine_ranges.end());
  }
  MP_ASSIGN_OR_RETURN(const TensorView k_pos,
                      Reshape(SliceRows(env.sparse.vs_k_pos.view(), 0, n_k), Shape{n_k}));
  MP_ASSIGN_OR_RETURN(TensorView scores,
                      ScratchBuffer(b, &env.sparse.vs_scores, DType::kF32, Shape{kv_heads, n_k}));
  MP_ASSIGN_OR_RETURN(TensorView diag, ScratchBuffer(b, &env.sparse.vs_diag, DType::kF32,
                                                     Shape{kv_heads, in.length}));
  KeyScoresArgs a{q, AsConst(q_pos), mine.k, AsConst(k_pos), lse, 0.0f, scores, diag};
  MP_RETURN_IF_ERROR(b.KeyScores(a));
  if (env.comm.size() > 1) {
    MP_RETURN_IF_ERROR(env.comm.AllReduce(diag, ReduceOp::kSum));
    env.stats.comm_bytes += static_cast<int64_t>(diag.NumBytes());
  }
  MP_ASSIGN_OR_RETURN(auto columns, SelectColumns(env, AsConst(scores), mine_ranges));
  MP_ASSIGN_OR_RETURN(auto diagonals, SelectDiagonals(env, AsConst(diag)));
  columns_ = Pack(columns, &columns_width_);
  diagonals_ = Pack(diagonals, &diagonals_width_);
  MP_RETURN_IF_ERROR(UploadI64(b, &env.sparse.vs_columns, columns_).status());
  return UploadI64(b, &env.sparse.vs_diagonals, diagonals_).status();
}

}  // namespace millipede
