#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "kernels/attention/sparse_attention.h"
#include "kernels/memory/float_rows.h"

namespace millipede {
namespace {

constexpr int64_t kMaxI64 = std::numeric_limits<int64_t>::max();

Status CheckTiles(const SparseAttentionArgs& args) {
  const int64_t n_q = args.q.dim(0), n_tiles = args.tiles.dim(0);
  const int64_t* tiles = args.tiles.as<const int64_t>();
  std::vector<std::pair<int64_t, int64_t>> rows;
  for (int64_t t = 0; t < n_tiles; ++t) {
    const int64_t begin = tiles[3 * t], end = tiles[3 * t + 1], pos = tiles[3 * t + 2];
    MP_REQUIRE(begin >= 0 && begin <= end, "sparse attention: tile ", t, " has rows [", begin, ", ",
               end, ")");
    if (end > n_q)
      return OutOfRangeError(detail::StrCat("sparse attention: tile ", t, " rows [", begin, ", ",
                                            end, ") outside the ", n_q, " query rows"));
    MP_REQUIRE(end - begin <= kSparseTileRows, "sparse attention: tile ", t, " has ", end - begin,
               " rows, more than ", kSparseTileRows);
    MP_REQUIRE(pos >= 0 && pos <= kMaxI64 - kSparseTileRows, "sparse attention: tile ", t,
               " starts at position ", pos);
    if (begin == end) continue;
    MP_REQUIRE(pos / kSparseTileRows == (pos + end - begin - 1) / kSparseTileRows,
               "sparse attention: tile ", t, " at positions [", pos, ", ", pos + end - begin,
               ") crosses a multiple of ", kSparseTileRows);
    rows.emplace_back(begin, end);
  }
  std::sort(rows.begin(), rows.end());
  for (size_t i = 1; i < rows.size(); ++i)
    MP_REQUIRE(rows[i - 1].second <= rows[i].first, "sparse attention: tiles at rows [",
               rows[i - 1].first, ", ", rows[i - 1].second, ") and [", rows[i].first, ", ",
               rows[i].second, ") overlap");
  return OkStatus();
}

Status CheckOffsets(ConstTensorView offsets, int64_t total, const char* what) {
  const int64_t* off = offsets.as<const int64_t>();
  const int64_t n = offsets.dim(0);
  MP_REQUIRE(off[0] == 0, "sparse attention: ", what, "[0] is ", off[0], ", expected 0");
  for (int64_t i = 1; i < n; ++i)
    MP_REQUIRE(off[i] >= off[i - 1], "sparse attention: ", what, " decrease at ", i);
  MP_REQUIRE(off[n - 1] == total, "sparse attention: ", what, " end at ", off[n - 1], ", but ",
             total, " rows are given");
  return OkStatus();
}

// Item i's ranges: rows inside the key buffer, sorted and disjoint by position.
Status CheckItemRanges(const SparseAttentionArgs& args, int64_t i) {
  const int64_t n_kv = args.k.dim(0);
  const int64_t* off = args.index.range_offsets.as<const int64_t>();
  const int64_t* ranges = args.index.ranges.as<const int64_t>();
  int64_t last_end = std::numeric_limits<int64_t>::min();
  for (int64_t r = off[i]; r < off[i + 1]; ++r) {
    const int64_t begin = ranges[3 * r], end = ranges[3 * r + 1], pos = ranges[3 * r + 2];
    MP_REQUIRE(begin <= end, "sparse attention: item ", i, " range ", r, " has rows [", begin, ", ",
               end, ")");
    if (begin < 0 || end > n_kv)
      return OutOfRangeError(detail::StrCat("sparse attention: item ", i, " range ", r, " rows [",
                                            begin, ", ", end, ") outside the ", n_kv, " key rows"));
    MP_REQUIRE(pos >= 0 && pos <= kMaxI64 - (end - begin), "sparse attention: item ", i, " range ",
               r, " starts at position ", pos);
    // Empty ranges too keep the order, so that the column check's merge walk stays simple.
    MP_REQUIRE(pos >= last_end, "sparse attention: item ", i, " range ", r, " at position ", pos,
               " is out of order or overlaps the one before");
    last_end = pos + end - begin;
  }
  return OkStatus();
}

// Item i's columns: rows inside the key buffer, strictly ascending by position, none inside one
// of the item's ranges (both lists are sorted, so one merge walk checks it).
Status CheckItemColumns(const SparseAttentionArgs& args, int64_t i) {
  const int64_t n_kv = args.k.dim(0);
  const int64_t* roff = args.index.range_offsets.as<const int64_t>();
  const int64_t* ranges = args.index.ranges.as<const int64_t>();
  const int64_t* coff = args.index.column_offsets.as<const int64_t>();
  const int64_t* cols = args.index.columns.as<const int64_t>();
  int64_t r = roff[i], last = -1;
  for (int64_t c = coff[i]; c < coff[i + 1]; ++c) {
    const int64_t row = cols[2 * c], pos = cols[2 * c + 1];
    if (row < 0 || row >= n_kv)
      return OutOfRangeError(detail::StrCat("sparse attention: item ", i, " column ", c, " row ",
                                            row, " outside the ", n_kv, " key rows"));
    MP_REQUIRE(pos > last, "sparse attention: item ", i, " column ", c, " at position ", pos,
               " is not after the one before");
    last = pos;
    while (r < roff[i + 1] && ranges[3 * r + 2] + ranges[3 * r + 1] - ranges[3 * r] <= pos) ++r;
    MP_REQUIRE(r == roff[i + 1] || pos < ranges[3 * r + 2], "sparse attention: item ", i,
               " column ", c, " at position ", pos, " lies inside range ", r);
  }
  return OkStatus();
}

// The keys of one item in position order, as (position, key row).
std::vector<std::pair<int64_t, int64_t>> ItemKeys(const SparseIndexView& index, int64_t i) {
  const int64_t* roff = index.range_offsets.as<const int64_t>();
  const int64_t* ranges = index.ranges.as<const int64_t>();
  const int64_t* coff = index.column_offsets.as<const int64_t>();
  const int64_t* cols = index.columns.as<const int64_t>();
  std::vector<std::pair<int64_t, int64_t>> keys;
  for (int64_t r = roff[i]; r < roff[i + 1]; ++r)
    for (int64_t row = ranges[3 * r]; row < ranges[3 * r + 1]; ++row)
      keys.emplace_back(ranges[3 * r + 2] + row - ranges[3 * r], row);
  for (int64_t c = coff[i]; c < coff[i + 1]; ++c) keys.emplace_back(cols[2 * c + 1], cols[2 * c]);
  // Position order makes any split of a key set into ranges and columns sum in the same order,
  // so such splits (and dense attention over the same keys) give bit-identical results.
  std::sort(keys.begin(), keys.end());
  return keys;
}

// Rows of one KV head of K or V, converted to float: [keys.size(), head_dim].
std::vector<float> LoadKeys(const ConstTensorView& t, int64_t kv_head,
                            const std::vector<std::pair<int64_t, int64_t>>& keys) {
  const int64_t num_kv_heads = t.dim(1), head_dim = t.dim(2);
  std::vector<float> rows(keys.size() * head_dim);
  for (size_t j = 0; j < keys.size(); ++j)
    LoadFloatRow(t.data, t.dtype, (keys[j].second * num_kv_heads + kv_head) * head_dim, head_dim,
                 rows.data() + j * head_dim);
  return rows;
}

// One query row of one head against the first `visible` keys (those at positions <= its own).
void AttendRow(const float* q, const std::vector<float>& k, const std::vector<float>& v,
               int64_t visible, int64_t head_dim, double scale, float* o, float* lse) {
  // Double sums, in AttentionRef's order: exact to ~1e-12, so it judges fp32 kernels.
  std::vector<double> scores(visible), acc(head_dim, 0.0);
  double max_score = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < visible; ++j) {
    double dot = 0.0;
    for (int64_t c = 0; c < head_dim; ++c) dot += static_cast<double>(q[c]) * k[j * head_dim + c];
    scores[j] = scale * dot;
    max_score = std::max(max_score, scores[j]);
  }
  double sum = 0.0;
  for (int64_t j = 0; j < visible; ++j) {
    const double p = std::exp(scores[j] - max_score);
    sum += p;
    for (int64_t c = 0; c < head_dim; ++c) acc[c] += p * v[j * head_dim + c];
  }
  // No visible key: o = 0 and lse = -inf by definition.
  for (int64_t c = 0; c < head_dim; ++c)
    o[c] = visible == 0 ? 0.0f : static_cast<float>(acc[c] / sum);
  *lse = visible == 0 ? -std::numeric_limits<float>::infinity()
                      : static_cast<float>(max_score + std::log(sum));
}

}  // namespace

Status SparseAttentionCheckArgs(const SparseAttentionArgs& args) {
  MP_REQUIRE(args.q.rank() == 3, "sparse attention q: rank ", args.q.rank(), ", expected 3");
  MP_REQUIRE(args.k.rank() == 3, "sparse attention k: rank ", args.k.rank(), ", expected 3");
  const int64_t n_q = args.q.dim(0), num_q_heads = args.q.dim(1), head_dim = args.q.dim(2);
  const int64_t n_kv = args.k.dim(0), num_kv_heads = args.k.dim(1);
  MP_REQUIRE(head_dim > 0, "sparse attention: head_dim must be positive");
  MP_REQUIRE(num_kv_heads > 0 && num_q_heads % num_kv_heads == 0, "sparse attention: num_q_heads ",
             num_q_heads, " is not a multiple of num_kv_heads ", num_kv_heads);
  const Shape q_shape{n_q, num_q_heads, head_dim}, kv_shape{n_kv, num_kv_heads, head_dim};
  MP_RETURN_IF_ERROR(CheckTensor(args.q, "sparse attention q", DType::kF32, q_shape));
  MP_REQUIRE(IsKvDType(args.k.dtype), "sparse attention k: dtype ", DTypeName(args.k.dtype),
             ", expected F32, BF16, F16 or F8_E4M3");
  MP_RETURN_IF_ERROR(CheckTensor(args.k, "sparse attention k", args.k.dtype, kv_shape));
  MP_RETURN_IF_ERROR(CheckTensor(args.v, "sparse attention v", args.k.dtype, kv_shape));
  MP_RETURN_IF_ERROR(CheckTensor(args.o, "sparse attention o", DType::kF32, q_shape));
  MP_RETURN_IF_ERROR(
      CheckTensor(args.lse, "sparse attention lse", DType::kF32, Shape{n_q, num_q_heads}));
  MP_REQUIRE(args.scale == 0.0f || (args.scale > 0.0f && std::isfinite(args.scale)),
             "sparse attention: scale ", args.scale,
             " must be 0 (meaning 1/sqrt(head_dim)) or > 0");
  MP_RETURN_IF_ERROR(SparseTilesCheck(args.tiles, "sparse attention"));
  return SparseIndexCheck(args.index, num_kv_heads * args.tiles.dim(0), "sparse attention");
}

Status SparseAttentionCheckData(const SparseAttentionArgs& args) {
  MP_RETURN_IF_ERROR(CheckTiles(args));
  MP_RETURN_IF_ERROR(
      CheckOffsets(args.index.range_offsets, args.index.ranges.dim(0), "range_offsets"));
  MP_RETURN_IF_ERROR(
      CheckOffsets(args.index.column_offsets, args.index.columns.dim(0), "column_offsets"));
  const int64_t items = args.k.dim(1) * args.tiles.dim(0);
  for (int64_t i = 0; i < items; ++i) {
    MP_RETURN_IF_ERROR(CheckItemRanges(args, i));
    MP_RETURN_IF_ERROR(CheckItemColumns(args, i));
  }
  return OkStatus();
}

Status SparseAttentionRef(const SparseAttentionArgs& args) {
  MP_RETURN_IF_ERROR(SparseAttentionCheckArgs(args));
  MP_RETURN_IF_ERROR(SparseAttentionCheckData(args));
  const int64_t num_q_heads = args.q.dim(1), head_dim = args.q.dim(2);
  const int64_t num_kv_heads = args.k.dim(1), n_tiles = args.tiles.dim(0);
  const int64_t group = num_q_heads / num_kv_heads;
  const double scale =
      args.scale == 0.0f ? 1.0 / std::sqrt(static_cast<double>(head_dim)) : args.scale;
  const int64_t* tiles = args.tiles.as<const int64_t>();
  for (int64_t g = 0; g < num_kv_heads; ++g)
    for (int64_t t = 0; t < n_tiles; ++t) {
      const auto keys = ItemKeys(args.index, g * n_tiles + t);
      const std::vector<float> k = LoadKeys(args.k, g, keys), v = LoadKeys(args.v, g, keys);
      for (int64_t row = tiles[3 * t]; row < tiles[3 * t + 1]; ++row) {
        const int64_t pos = tiles[3 * t + 2] + row - tiles[3 * t];
        // Keys are in position order: the visible ones are a prefix.
        const int64_t visible =
            std::upper_bound(keys.begin(), keys.end(), std::make_pair(pos, kMaxI64)) - keys.begin();
        for (int64_t h = g * group; h < (g + 1) * group; ++h) {
          const int64_t at = row * num_q_heads + h;
          AttendRow(args.q.as<const float>() + at * head_dim, k, v, visible, head_dim, scale,
                    args.o.as<float>() + at * head_dim, args.lse.as<float>() + at);
        }
      }
    }
  return OkStatus();
}

}  // namespace millipede
