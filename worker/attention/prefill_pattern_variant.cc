#include "worker/attention/prefill_pattern_variant.h"

#include <algorithm>

#include "worker/attention/scratch_buffer.h"

namespace millipede {
namespace {

// Host copy of a device I64 scalar at `index` of `t`.
StatusOr<int64_t> ReadI64(Backend& b, ConstTensorView t, int64_t index) {
  int64_t value = 0;
  MP_RETURN_IF_ERROR(b.CopyToHost(SliceRows(t, index, 1), {&value, DType::kI64, Shape{1}}));
  return value;
}

}  // namespace

StatusOr<ConstTensorView> SparseIndexBuilder::UploadTiles(Backend& b,
                                                          const std::vector<int64_t>& tiles) {
  MP_ASSIGN_OR_RETURN(TensorView view, UploadI64(b, &tiles_, tiles, 3));
  return AsConst(view);
}

StatusOr<ConstTensorView> SparseIndexBuilder::UploadRuns(Backend& b,
                                                         const std::vector<int64_t>& runs) {
  MP_ASSIGN_OR_RETURN(TensorView view, UploadI64(b, &runs_, runs, 3));
  return AsConst(view);
}

int64_t SparseIndexBuilder::NumBytes() const {
  int64_t bytes = 0;
  for (const BackendTensor* t :
       {&tiles_, &runs_, &range_offsets_, &ranges_, &column_offsets_, &columns_})
    bytes += static_cast<int64_t>(t->NumBytes());
  return bytes;
}

StatusOr<SparseIndexView> SparseIndexBuilder::Build(AttentionEnv& env, SparsePatternIndex& pattern,
                                                    ConstTensorView tiles, ConstTensorView runs) {
  Backend& b = env.backend;
  const int64_t items = env.config.num_key_value_heads * tiles.dim(0);
  MP_ASSIGN_OR_RETURN(TensorView range_offsets,
                      ScratchBuffer(b, &range_offsets_, DType::kI64, Shape{items + 1}));
  MP_ASSIGN_OR_RETURN(TensorView column_offsets,
                      ScratchBuffer(b, &column_offsets_, DType::kI64, Shape{items + 1}));
  SparseIndexOut out{range_offsets, {}, column_offsets, {}};
  MP_RETURN_IF_ERROR(pattern.BuildPass(env, tiles, runs, out, /*fill=*/false));
  MP_ASSIGN_OR_RETURN(const int64_t n_ranges, ReadI64(b, AsConst(range_offsets), items));
  MP_ASSIGN_OR_RETURN(const int64_t n_columns, ReadI64(b, AsConst(column_offsets), items));
  MP_ASSIGN_OR_RETURN(out.ranges, ScratchBuffer(b, &ranges_, DType::kI64, Shape{n_ranges, 3}));
  MP_ASSIGN_OR_RETURN(out.columns, ScratchBuffer(b, &columns_, DType::kI64, Shape{n_columns, 2}));
  MP_RETURN_IF_ERROR(pattern.BuildPass(env, tiles, runs, out, /*fill=*/true));
  return SparseIndexView{AsConst(range_offsets), AsConst(out.ranges), AsConst(column_offsets),
                         AsConst(out.columns)};
}

StatusOr<std::vector<TokenRange>> IndexedPositions(AttentionEnv& env, const PrefillInput& in,
                                                   const std::vector<int64_t>& tiles,
                                                   SparseIndexBuilder& builder,
                                                   SparsePatternIndex& pattern) {
  std::vector<TokenRange> out;
  if (tiles.empty()) return out;
  Backend& b = env.backend;
  MP_ASSIGN_OR_RETURN(ConstTensorView dev_tiles, builder.UploadTiles(b, tiles));
  MP_ASSIGN_OR_RETURN(ConstTensorView runs, builder.UploadRuns(b, {0, in.length, 0}));
  MP_ASSIGN_OR_RETURN(SparseIndexView index, builder.Build(env, pattern, dev_tiles, runs));
  std::vector<int64_t> host(static_cast<size_t>(index.ranges.NumElements()));
  if (!host.empty())
    MP_RETURN_IF_ERROR(b.CopyToHost(index.ranges, {host.data(), DType::kI64, index.ranges.shape}));
  for (size_t i = 0; i < host.size(); i += 3)
    out.push_back({host[i + 2], host[i + 2] + host[i + 1] - host[i]});
  return out;
}

std::vector<int64_t> SparseKeyRuns(std::span<const TokenRange> ranges) {
  std::vector<int64_t> runs;
  int64_t row = 0;
  for (const TokenRange& r : ranges) {
    runs.insert(runs.end(), {r.begin, r.end, row});
    row += r.size();
  }
  return runs;
}

std::vector<int64_t> SparseQueryTiles(std::span<const TokenRange> ranges, int64_t grid) {
  std::vector<int64_t> tiles;
  int64_t row = 0;
  for (const TokenRange& r : ranges) {
    for (int64_t p = r.begin; p < r.end;) {
      const int64_t next = std::min(r.end, (p / grid + 1) * grid);
      tiles.insert(tiles.end(), {row + p - r.begin, row + next - r.begin, p});
      p = next;
    }
    row += r.size();
  }
  return tiles;
}

}  // namespace millipede
