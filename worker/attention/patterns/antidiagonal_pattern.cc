#include "worker/attention/patterns/antidiagonal_pattern.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <string>

#include "worker/attention/kv_fetch.h"
#include "worker/attention/scratch_buffer.h"
#include "worker/attention/sparse_prefill_scratch.h"

namespace millipede {
namespace {

using Run = std::array<int64_t, 3>;  // (pos_begin, pos_end, row_begin)

class AntidiagonalVariant final : public PrefillPatternVariant {
 public:
  PrefillPattern pattern() const override { return PrefillPattern::kAntidiagonal; }
  PrefillKernel kernel() const override { return PrefillKernel::kSparse; }
  // One block size and stride per layer, which the query tiles and the selection can serve.
  Status CheckLayer(std::span<const HeadPrefillPolicy> heads, int64_t layer) const override {
    const AntidiagonalParams* first = nullptr;
    for (size_t h = 0; h < heads.size(); ++h) {
      if (heads[h].pattern != PrefillPattern::kAntidiagonal) continue;
      const AntidiagonalParams& p = heads[h].antidiagonal;
      const std::string where =
          " (layer " + std::to_string(layer) + ", KV head " + std::to_string(h) + ")";
      if (p.block % kSparseTileRows != 0 && kSparseTileRows % p.block != 0)
        return InvalidArgumentError("antidiagonal block " + std::to_string(p.block) + where +
                                    " must divide or be a multiple of " +
                                    std::to_string(kSparseTileRows));
      const int64_t rows = p.block / p.stride;  // reshaped rows per block
      if (p.block % p.stride != 0 || rows > 16 || (rows & (rows - 1)) != 0)
        return InvalidArgumentError("antidiagonal stride " + std::to_string(p.stride) + where +
                                    " must divide block " + std::to_string(p.block) +
                                    " into a power of two of at most 16 rows");
      if (p.mass_permille > 1000)
        return InvalidArgumentError("antidiagonal mass_permille " +
                                    std::to_string(p.mass_permille) + where +
                                    " must be at most 1000");
      if (first != nullptr && (p.block != first->block || p.stride != first->stride))
        return UnimplementedError(
            "antidiagonal heads of one layer with different block sizes or strides" + where +
            " are not available in this engine yet");
      first = &p;
    }
    return OkStatus();
  }
  std::unique_ptr<SparsePatternIndex> MakeIndex(
      std::span<const HeadPrefillPolicy> heads) const override {
    return std::make_unique<AntidiagonalHeads>(heads);
  }
};

// The runs of the positions of `ranges` (held at rows row0, row0 + 1, ... in order) that are
// also in `keep` (increasing, disjoint).
void AppendRuns(std::span<const TokenRange> ranges, int64_t row0, std::span<const TokenRange> keep,
                std::vector<Run>* runs) {
  int64_t row = row0;
  for (const TokenRange& r : ranges) {
    for (const TokenRange& p : IntersectRanges(std::span<const TokenRange>(&r, 1), keep))
      runs->push_back({p.begin, p.end, row + p.begin - r.begin});
    row += r.size();
  }
}

std::vector<int64_t> Flatten(std::vector<Run> runs) {
  std::sort(runs.begin(), runs.end());
  std::vector<int64_t> out;
  for (const Run& r : runs) out.insert(out.end(), r.begin(), r.end());
  return out;
}

// The positions of the blocks of `block` positions that `ranges` touch, merged.
std::vector<TokenRange> TouchedBlocks(std::span<const TokenRange> ranges, int64_t block) {
  std::vector<TokenRange> out;
  for (const TokenRange& r : ranges)
    if (!r.empty()) out.push_back({r.begin / block * block, ((r.end - 1) / block + 1) * block});
  return NormalizeRanges(std::move(out));
}

// The blocks that the queries of two or more ranks touch, as positions.
std::vector<TokenRange> SharedBlocks(std::span<const std::vector<TokenRange>> rank_queries,
                                     int64_t block) {
  std::vector<TokenRange> shared;
  for (size_t r = 0; r < rank_queries.size(); ++r)
    for (size_t s = r + 1; s < rank_queries.size(); ++s)
      for (const TokenRange& t : IntersectRanges(TouchedBlocks(rank_queries[r], block),
                                                 TouchedBlocks(rank_queries[s], block)))
        shared.push_back(t);
  return NormalizeRanges(std::move(shared));
}

}  // namespace

const PrefillPatternVariant& AntidiagonalPattern() {
  static const AntidiagonalVariant variant;
  return variant;
}

AntidiagonalHeads::AntidiagonalHeads(std::span<const HeadPrefillPolicy> heads)
    : permille_(heads.size(), 0) {
  for (size_t g = 0; g < heads.size(); ++g) {
    if (heads[g].pattern != PrefillPattern::kAntidiagonal) continue;
    block_ = heads[g].antidiagonal.block;  // one block size and stride per layer (CheckLayer)
    stride_ = heads[g].antidiagonal.stride;
    permille_[g] = heads[g].antidiagonal.mass_permille;
  }
}

int64_t AntidiagonalHeads::grid() const { return std::gcd(block_, kSparseTileRows); }

StatusOr<ConstTensorView> AntidiagonalHeads::AllKeys(AttentionEnv& env, const PrefillInput& in,
                                                     ConstKvRows mine,
                                                     std::span<const TokenRange> mine_ranges,
                                                     int64_t key_end, std::vector<int64_t>* runs) {
  std::vector<Run> all;
  AppendRuns(mine_ranges, 0, std::vector<TokenRange>{{0, in.length}}, &all);
  if (env.comm.size() == 1) {
    *runs = Flatten(std::move(all));
    return mine.k;
  }
  Backend& b = env.backend;
  const std::vector<TokenRange> held =
      NormalizeRanges(std::vector<TokenRange>(mine_ranges.begin(), mine_ranges.end()));
  const std::vector<TokenRange> needed =
      key_end > 0 ? SubtractRanges(std::vector<TokenRange>{{0, key_end}}, held)
                  : std::vector<TokenRange>{};
  KvFetch& fetch = env.sparse.fetch;
  MP_RETURN_IF_ERROR(fetch.Run(env, needed, in.rank_blocks, mine, /*keys_only=*/true));
  const int64_t n_mine = mine.k.dim(0), fetched = fetch.fetched_rows();
  MP_ASSIGN_OR_RETURN(TensorView k,
                      ScratchBuffer(b, &env.sparse.ad_k, mine.k.dtype,
                                    Shape{n_mine + fetched, mine.k.dim(1), mine.k.dim(2)}));
  std::vector<int64_t> identity(static_cast<size_t>(std::max(n_mine, fetched)));
  std::iota(identity.begin(), identity.end(), 0);
  MP_ASSIGN_OR_RETURN(TensorView index, UploadI64(b, &env.sparse.ad_index, identity));
  if (n_mine > 0)
    MP_RETURN_IF_ERROR(
        b.GatherRows({mine.k, AsConst(SliceRows(index, 0, n_mine)), SliceRows(k, 0, n_mine)}));
  if (fetched > 0)
    MP_RETURN_IF_ERROR(b.GatherRows(
        {fetch.rows().k, AsConst(SliceRows(index, 0, fetched)), SliceRows(k, n_mine, fetched)}));
  const std::vector<int64_t>& f = fetch.runs();
  for (size_t i = 0; i < f.size(); i += 3) all.push_back({f[i], f[i + 1], f[i + 2] + n_mine});
  *runs = Flatten(std::move(all));
  return AsConst(k);
}

Status AntidiagonalHeads::Select(AttentionEnv& env, const PrefillInput& in, ConstTensorView q,
                                 const std::vector<int64_t>& q_runs, ConstTensorView k,
                                 const std::vector<int64_t>& k_runs) {
  if (q_runs.empty()) return OkStatus();
  std::vector<int64_t> both = q_runs;
  both.insert(both.end(), k_runs.begin(), k_runs.end());
  MP_ASSIGN_OR_RETURN(TensorView runs, UploadI64(env.backend, &env.sparse.ad_runs, both, 3));
  const int64_t nq = static_cast<int64_t>(q_runs.size()) / 3;
  AntidiagonalSelectArgs a;
  a.q = q;
  a.q_runs = AsConst(SliceRows(runs, 0, nq));
  a.k = k;
  a.k_runs = AsConst(SliceRows(runs, nq, runs.dim(0) - nq));
  a.length = in.length;
  a.block = block_;
  a.stride = stride_;
  a.scale = 1.0f / std::sqrt(static_cast<float>(env.config.head_dim));
  a.permille = permille_.data();
  a.qb_begin = qb_begin_;
  a.kept = kept_;
  return env.backend.AntidiagonalSelect(a);
}

Status AntidiagonalHeads::Plan(AttentionEnv& env, const PrefillInput& in, ConstKvRows mine,
                               std::span<const TokenRange> mine_ranges) {
  Backend& b = env.backend;
  const ModelConfig& c = env.config;
  const int64_t kv_heads = c.num_key_value_heads, heads = c.num_attention_heads, d = c.head_dim;
  const int64_t num_kb = (in.length + block_ - 1) / block_;
  qb_begin_ = in.step_begin / block_;
  MP_ASSIGN_OR_RETURN(kept_, ScratchBuffer(b, &env.sparse.ad_kept, DType::kI32,
                                           Shape{kv_heads, num_kb - qb_begin_, num_kb / 32 + 1}));
  // The keys before this rank's last query block.
  const std::vector<TokenRange> mine_blocks = TouchedBlocks(in.q_ranges, block_);
  const int64_t key_end = mine_blocks.empty() ? 0 : std::min(in.length, mine_blocks.back().end);
  std::vector<int64_t> k_runs;
  MP_ASSIGN_OR_RETURN(ConstTensorView k, AllKeys(env, in, mine, mine_ranges, key_end, &k_runs));
  // Blocks no other rank's queries touch: this rank's queries alone.
  const int ranks = env.comm.size();
  const std::vector<TokenRange> shared =
      ranks > 1 ? SharedBlocks(in.rank_queries, block_) : std::vector<TokenRange>{};
  const int64_t n = in.q.dim(0);
  MP_ASSIGN_OR_RETURN(ConstTensorView q, Reshape(in.q, Shape{n, heads, d}));
  std::vector<Run> own;
  AppendRuns(in.q_ranges, 0, SubtractRanges(std::vector<TokenRange>{{0, in.length}}, shared), &own);
  MP_RETURN_IF_ERROR(Select(env, in, q, Flatten(std::move(own)), k, k_runs));
  if (shared.empty()) return OkStatus();
  // Shared blocks: every rank sends its queries in them; each scores the ones it touches.
  std::vector<std::vector<TokenRange>> held(static_cast<size_t>(ranks));
  int64_t most = 0;
  for (int r = 0; r < ranks; ++r) {
    held[r] = IntersectRanges(in.rank_queries[r], shared);
    most = std::max(most, TotalSize(held[r]));
  }
  const int me = env.comm.rank();
  std::vector<Run> mine_shared;
  AppendRuns(in.q_ranges, 0, held[me], &mine_shared);
  std::vector<int64_t> rows;
  for (const Run& r : mine_shared)
    for (int64_t i = 0; i < r[1] - r[0]; ++i) rows.push_back(r[2] + i);
  MP_ASSIGN_OR_RETURN(TensorView send,
                      ScratchBuffer(b, &env.sparse.ad_q_send, DType::kF32, Shape{most, heads * d}));
  MP_ASSIGN_OR_RETURN(TensorView gathered, ScratchBuffer(b, &env.sparse.ad_q_shared, DType::kF32,
                                                         Shape{ranks * most, heads * d}));
  if (!rows.empty()) {
    MP_ASSIGN_OR_RETURN(TensorView index, UploadI64(b, &env.sparse.ad_index, rows));
    MP_RETURN_IF_ERROR(b.GatherRows(
        {in.q, AsConst(index), SliceRows(send, 0, static_cast<int64_t>(rows.size()))}));
  }
  MP_RETURN_IF_ERROR(env.comm.AllGather(AsConst(send), gathered));
  env.stats.comm_bytes += static_cast<int64_t>(send.NumBytes());
  const std::vector<TokenRange> scored = IntersectRanges(mine_blocks, shared);
  std::vector<Run> shared_runs;
  for (int r = 0; r < ranks; ++r) AppendRuns(held[r], r * most, scored, &shared_runs);
  MP_ASSIGN_OR_RETURN(ConstTensorView q_shared,
                      Reshape(AsConst(gathered), Shape{ranks * most, heads, d}));
  return Select(env, in, q_shared, Flatten(std::move(shared_runs)), k, k_runs);
}

StatusOr<std::vector<TokenRange>> AntidiagonalHeads::Needs(AttentionEnv& env,
                                                           const PrefillInput& in,
                                                           const std::vector<int64_t>& tiles,
                                                           SparseIndexBuilder& builder) {
  return IndexedPositions(env, in, tiles, builder, *this);
}

Status AntidiagonalHeads::BuildPass(AttentionEnv& env, ConstTensorView tiles, ConstTensorView runs,
                                    const SparseIndexOut& out, bool fill) {
  BlockMaskIndexArgs a;
  a.tiles = tiles;
  a.runs = runs;
  a.kept = AsConst(kept_);
  a.qb_begin = qb_begin_;
  a.block = block_;
  a.heads = permille_.data();
  a.skip_absent = true;
  a.out = out;
  a.inputs_unchanged_since_count = fill;
  return env.backend.BlockMaskIndex(a);
}

}  // namespace millipede
