#include <algorithm>
#include <array>
#include <vector>

#include "kernels/memory/float_rows.h"
#include "kernels/sparse_index/block_sums.h"
#include "kernels/sparse_index/sparse_index.h"
#include "kernels/sparse_index/sparse_index_ref.h"

namespace millipede {

Status BlockSumsCheckArgs(const BlockSumsArgs& args) {
  MP_REQUIRE(args.x.rank() == 3, "block_sums x: rank ", args.x.rank(), ", expected 3");
  const int64_t num_heads = args.x.dim(1), head_dim = args.x.dim(2);
  MP_REQUIRE(IsKvDType(args.x.dtype), "block_sums x: dtype ", DTypeName(args.x.dtype),
             ", expected F32, BF16, F16 or F8_E4M3");
  MP_RETURN_IF_ERROR(CheckTensor(args.x, "block_sums x", args.x.dtype, args.x.shape));
  MP_RETURN_IF_ERROR(SparseRunsCheck(args.runs, "block_sums"));
  MP_REQUIRE(args.block > 0, "block_sums: block = ", args.block, " must be positive");
  MP_REQUIRE(args.group > 0 && num_heads % args.group == 0, "block_sums: group ", args.group,
             " does not divide ", num_heads, " heads");
  MP_REQUIRE(args.sums.rank() == 3, "block_sums sums: rank ", args.sums.rank(), ", expected 3");
  const int64_t num_blocks = args.sums.dim(0);
  MP_RETURN_IF_ERROR(CheckTensor(args.sums, "block_sums sums", DType::kF32,
                                 Shape{num_blocks, num_heads / args.group, head_dim}));
  MP_RETURN_IF_ERROR(CheckTensor(args.counts, "block_sums counts", DType::kF32, Shape{num_blocks}));
  return OkStatus();
}

namespace {

// Every row of x in exactly one run: the runs' row spans, sorted, tile [0, n) without gaps.
Status CheckRowsCovered(ConstTensorView runs, int64_t n) {
  const int64_t* r = runs.as<const int64_t>();
  std::vector<std::array<int64_t, 2>> spans;  // (row_begin, row_end)
  for (int64_t i = 0; i < runs.dim(0); ++i) {
    MP_REQUIRE(r[3 * i] >= 0 && r[3 * i + 1] >= r[3 * i] && r[3 * i + 2] >= 0, "block_sums: run ",
               i, " (positions [", r[3 * i], ", ", r[3 * i + 1], ") at row ", r[3 * i + 2],
               ") is malformed");
    if (r[3 * i + 1] > r[3 * i])
      spans.push_back({r[3 * i + 2], r[3 * i + 2] + r[3 * i + 1] - r[3 * i]});
  }
  std::sort(spans.begin(), spans.end());
  int64_t next = 0;
  for (const auto& s : spans) {
    MP_REQUIRE(s[0] == next, "block_sums: rows ", std::min(s[0], next), " to ",
               std::max(s[0], next) - 1, (s[0] > next ? " are in no run" : " are in two runs"));
    next = s[1];
  }
  MP_REQUIRE(next == n, "block_sums: the runs cover rows [0, ", next, ") of ", n, " rows of x");
  return OkStatus();
}

}  // namespace

Status BlockSumsRef(const BlockSumsArgs& args) {
  MP_RETURN_IF_ERROR(BlockSumsCheckArgs(args));
  const int64_t n = args.x.dim(0), num_heads = args.x.dim(1), head_dim = args.x.dim(2);
  const int64_t num_blocks = args.sums.dim(0), out_heads = num_heads / args.group;
  MP_RETURN_IF_ERROR(sparse_index_ref::KeyLayout::Read(args.runs, "block_sums").status());
  MP_RETURN_IF_ERROR(CheckRowsCovered(args.runs, n));
  std::vector<double> sums(static_cast<size_t>(num_blocks * out_heads * head_dim), 0.0);
  std::vector<double> counts(static_cast<size_t>(num_blocks), 0.0);
  std::vector<float> row(static_cast<size_t>(num_heads * head_dim));
  const int64_t* r = args.runs.as<const int64_t>();
  for (int64_t i = 0; i < args.runs.dim(0); ++i) {
    const int64_t pos_begin = r[3 * i], pos_end = r[3 * i + 1], row_begin = r[3 * i + 2];
    for (int64_t pos = pos_begin; pos < pos_end; ++pos) {
      const int64_t b = pos / args.block;
      MP_REQUIRE(b < num_blocks, "block_sums: position ", pos, " is in block ", b, ", beyond ",
                 num_blocks, " blocks of ", args.block);
      LoadFloatRow(args.x.data, args.x.dtype, (row_begin + pos - pos_begin) * num_heads * head_dim,
                   num_heads * head_dim, row.data());
      for (int64_t h = 0; h < num_heads; ++h)
        for (int64_t c = 0; c < head_dim; ++c)
          sums[(b * out_heads + h / args.group) * head_dim + c] += row[h * head_dim + c];
      counts[b] += 1.0;
    }
  }
  std::transform(sums.begin(), sums.end(), args.sums.as<float>(),
                 [](double v) { return static_cast<float>(v); });
  std::transform(counts.begin(), counts.end(), args.counts.as<float>(),
                 [](double v) { return static_cast<float>(v); });
  return OkStatus();
}

}  // namespace millipede
