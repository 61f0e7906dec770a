// The vertical-slash variant, its index builds and the positions its selection needs; the
// selection itself is vertical_slash_selection.cc.
#include "worker/attention/patterns/vertical_slash_pattern.h"

#include <algorithm>

#include "worker/attention/kv_fetch.h"
#include "worker/attention/sparse_prefill_scratch.h"

namespace millipede {
namespace {

class VerticalSlashVariant final : public PrefillPatternVariant {
 public:
  PrefillPattern pattern() const override { return PrefillPattern::kVerticalSlash; }
  PrefillKernel kernel() const override { return PrefillKernel::kSparse; }
  std::unique_ptr<SparsePatternIndex> MakeIndex(
      std::span<const HeadPrefillPolicy> heads) const override {
    return std::make_unique<VerticalSlashHeads>(heads);
  }
};

}  // namespace

const PrefillPatternVariant& VerticalSlashPattern() {
  static const VerticalSlashVariant variant;
  return variant;
}

std::vector<TokenRange> VerticalSlashNeeds(std::span<const TokenRange> q_ranges,
                                           std::span<const int64_t> columns,
                                           std::span<const int64_t> diagonals) {
  std::vector<TokenRange> out;
  if (q_ranges.empty()) return out;
  const int64_t last = q_ranges.back().end - 1;
  for (int64_t c : columns)
    if (c >= 0 && c <= last) out.push_back({c, c + 1});
  // A run's tiles see the bands of their whole query blocks (vertical_slash_index.h): from the
  // first block's start to the run's last query.
  for (const TokenRange& q : q_ranges) {
    const int64_t a = q.begin / kSparseTileRows * kSparseTileRows;
    const int64_t b = (q.end - 1) / kSparseTileRows * kSparseTileRows + kSparseTileRows - 1;
    for (int64_t d : diagonals)
      if (d >= 0 && b - d >= 0)
        out.push_back({std::max<int64_t>(0, a - d), std::min(b - d, q.end - 1) + 1});
  }
  return NormalizeRanges(std::move(out));
}

VerticalSlashHeads::VerticalSlashHeads(std::span<const HeadPrefillPolicy> heads)
    : heads_(heads.begin(), heads.end()) {}

StatusOr<std::vector<TokenRange>> VerticalSlashHeads::Needs(AttentionEnv& env,
                                                            const PrefillInput& in,
                                                            const std::vector<int64_t>& tiles,
                                                            SparseIndexBuilder& builder) {
  std::vector<TokenRange> needs;
  for (size_t g = 0; g < heads_.size(); ++g) {
    if (heads_[g].pattern != PrefillPattern::kVerticalSlash) continue;
    const auto row = [&](const std::vector<int64_t>& v, int64_t width) {
      std::span<const int64_t> s(v.data() + static_cast<int64_t>(g) * width,
                                 static_cast<size_t>(width));
      return s.first(static_cast<size_t>(std::find(s.begin(), s.end(), -1) - s.begin()));
    };
    for (const TokenRange& r : VerticalSlashNeeds(in.q_ranges, row(columns_, columns_width_),
                                                  row(diagonals_, diagonals_width_)))
      needs.push_back(r);
  }
  return needs;
}

Status VerticalSlashHeads::BuildPass(AttentionEnv& env, ConstTensorView tiles, ConstTensorView runs,
                                     const SparseIndexOut& out, bool fill) {
  const int64_t kv_heads = env.config.num_key_value_heads;
  VerticalSlashIndexArgs a;
  a.tiles = tiles;
  a.runs = runs;
  a.columns = {env.sparse.vs_columns.view().data, DType::kI64, Shape{kv_heads, columns_width_}};
  a.diagonals = {env.sparse.vs_diagonals.view().data, DType::kI64,
                 Shape{kv_heads, diagonals_width_}};
  a.skip_absent = true;
  a.out = out;
  a.inputs_unchanged_since_count = fill;
  return env.backend.VerticalSlashIndex(a);
}

}  // namespace millipede
