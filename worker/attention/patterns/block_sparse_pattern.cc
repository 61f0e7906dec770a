#include "worker/attention/patterns/block_sparse_pattern.h"

#include <numeric>
#include <string>

#include "worker/attention/scratch_buffer.h"
#include "worker/attention/sparse_prefill_scratch.h"

namespace millipede {
namespace {

class BlockSparseVariant final : public PrefillPatternVariant {
 public:
  PrefillPattern pattern() const override { return PrefillPattern::kBlockSparse; }
  PrefillKernel kernel() const override { return PrefillKernel::kSparse; }
  // One block size per layer, one the query tiles can serve.
  Status CheckLayer(std::span<const HeadPrefillPolicy> heads, int64_t layer) const override {
    int64_t block = 0;
    for (size_t h = 0; h < heads.size(); ++h) {
      if (heads[h].pattern != PrefillPattern::kBlockSparse) continue;
      const std::string where =
          " (layer " + std::to_string(layer) + ", KV head " + std::to_string(h) + ")";
      const int64_t b = heads[h].block_sparse.block;
      if (block != 0 && b != block)
        return UnimplementedError("block-sparse heads of one layer with different block sizes" +
                                  where + " are not available in this engine yet");
      if (b % kSparseTileRows != 0 && kSparseTileRows % b != 0)
        return InvalidArgumentError("block-sparse block " + std::to_string(b) + where +
                                    " must divide or be a multiple of " +
                                    std::to_string(kSparseTileRows));
      block = b;
    }
    return OkStatus();
  }
  std::unique_ptr<SparsePatternIndex> MakeIndex(
      std::span<const HeadPrefillPolicy> heads) const override {
    return std::make_unique<BlockSparseHeads>(heads);
  }
};

}  // namespace

const PrefillPatternVariant& BlockSparsePattern() {
  static const BlockSparseVariant variant;
  return variant;
}

BlockSparseHeads::BlockSparseHeads(std::span<const HeadPrefillPolicy> heads)
    : top_blocks_(heads.size(), 0) {
  for (size_t g = 0; g < heads.size(); ++g) {
    if (heads[g].pattern != PrefillPattern::kBlockSparse) continue;
    block_ = heads[g].block_sparse.block;  // one block size per layer (CheckLayer)
    top_blocks_[g] = heads[g].block_sparse.top_blocks;
  }
}

int64_t BlockSparseHeads::grid() const { return std::gcd(block_, kSparseTileRows); }

Status BlockSparseHeads::Plan(AttentionEnv& env, const PrefillInput& in, ConstKvRows mine,
                              std::span<const TokenRange> mine_ranges) {
  Backend& b = env.backend;
  const ModelConfig& c = env.config;
  const int64_t kv_heads = c.num_key_value_heads, d = c.head_dim;
  const int64_t blocks = (in.length + block_ - 1) / block_;
  MP_ASSIGN_OR_RETURN(TensorView q_sums, ScratchBuffer(b, &env.sparse.bs_q_sums, DType::kF32,
                                                       Shape{blocks, kv_heads, d}));
  MP_ASSIGN_OR_RETURN(TensorView k_sums, ScratchBuffer(b, &env.sparse.bs_k_sums, DType::kF32,
                                                       Shape{blocks, kv_heads, d}));
  MP_ASSIGN_OR_RETURN(TensorView q_counts,
                      ScratchBuffer(b, &env.sparse.bs_q_counts, DType::kF32, Shape{blocks}));
  MP_ASSIGN_OR_RETURN(TensorView k_counts,
                      ScratchBuffer(b, &env.sparse.bs_k_counts, DType::kF32, Shape{blocks}));
  const int64_t n = in.q.dim(0);
  MP_ASSIGN_OR_RETURN(ConstTensorView q, Reshape(in.q, Shape{n, c.num_attention_heads, d}));
  MP_ASSIGN_OR_RETURN(TensorView q_runs,
                      UploadI64(b, &env.sparse.bs_runs, SparseKeyRuns(in.q_ranges), 3));
  MP_RETURN_IF_ERROR(b.BlockSums(
      {q, AsConst(q_runs), block_, c.num_attention_heads / kv_heads, q_sums, q_counts}));
  MP_ASSIGN_OR_RETURN(TensorView k_runs,
                      UploadI64(b, &env.sparse.bs_runs, SparseKeyRuns(mine_ranges), 3));
  MP_RETURN_IF_ERROR(b.BlockSums({mine.k, AsConst(k_runs), block_, 1, k_sums, k_counts}));
  if (env.comm.size() > 1) {
    for (TensorView t : {q_sums, k_sums, q_counts, k_counts}) {
      MP_RETURN_IF_ERROR(env.comm.AllReduce(t, ReduceOp::kSum));
      env.stats.comm_bytes += static_cast<int64_t>(t.NumBytes());
    }
  }
  pooled_ = {AsConst(q_sums), AsConst(q_counts), AsConst(k_sums), AsConst(k_counts)};
  return OkStatus();
}

StatusOr<std::vector<TokenRange>> BlockSparseHeads::Needs(AttentionEnv& env, const PrefillInput& in,
                                                          const std::vector<int64_t>& tiles,
                                                          SparseIndexBuilder& builder) {
  return IndexedPositions(env, in, tiles, builder, *this);
}

Status BlockSparseHeads::BuildPass(AttentionEnv& env, ConstTensorView tiles, ConstTensorView runs,
                                   const SparseIndexOut& out, bool fill) {
  const ModelConfig& c = env.config;
  BlockSparseIndexArgs a;
  a.tiles = tiles;
  a.runs = runs;
  a.q_sums = pooled_.q_sums;
  a.q_counts = pooled_.q_counts;
  a.k_sums = pooled_.k_sums;
  a.k_counts = pooled_.k_counts;
  a.block = block_;
  a.group = c.num_attention_heads / c.num_key_value_heads;
  a.top_blocks = top_blocks_.data();
  a.skip_absent = true;
  a.out = out;
  a.inputs_unchanged_since_count = fill;
  return env.backend.BlockSparseIndex(a);
}

}  // namespace millipede
