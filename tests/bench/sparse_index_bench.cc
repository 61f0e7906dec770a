// millipede-bench-sparse-index: times the CUDA backend's sparse index builders as a prefill of
// one layer calls them (each call ends with its own wait) and prints one JSON object: KeyScores
// of the last queries with diagonal sums (MInference's vertical and slash scores), the
// vertical-slash index (count pass, fill pass), block sums of the queries and keys and the
// block-sparse index (count, fill). Selections are synthetic: the columns uniformly random, a
// fraction of the diagonals the nearest ones (as slash scores favour) and the rest random.
// Wall-clock milliseconds per call, averaged after warm-up runs, and the index sizes. Each index
// is also built with the fill pass reusing the count pass (inputs_unchanged_since_count, as the
// prefill calls it), timed per pass and checked to equal the other build. With --attention the
// block-sparse index then drives the sparse attention op as the prefill runs it for block-sparse
// heads (q in F32, as the prefill holds it, also for the block sums), and the report adds its time,
// work and density and the layer's block-sparse total. The antidiagonal selection (XAttention's
// block scores and mass threshold) is timed over the same q and k, with its rate, then its index
// (block_mask_index) and, with --attention, the sparse attention op over it and the layer's
// antidiagonal total. Several --tokens give one object per length under "results".
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/flags.h"
#include "tests/bench/sparse_bench_util.h"
#include "worker/backend/backend.h"
#include "worker/backend/backend_factory.h"

namespace millipede {
namespace {

constexpr char kUsage[] = R"(usage: millipede-bench-sparse-index [options]

  --tokens S        prompt length, or a comma list of them (default 1048576)
  --q-heads H       query heads (default 32)
  --kv-heads H      key/value heads (default 8)
  --head-dim D      (default 128)
  --last-queries Q  observed queries of the vertical-slash scores (default 64)
  --vertical V      columns per KV head (default 1000)
  --slash N         diagonals per KV head (default 6096)
  --near-percent P  percent of the diagonals that are the nearest (0, 1, ...) (default 90)
  --top-blocks K    block-sparse key blocks per query block (default 100)
  --ad-block B      antidiagonal block (default 128)
  --ad-stride S     antidiagonal stride (default 8)
  --mass-permille P antidiagonal mass threshold in thousandths (default 900)
  --attention       also time the sparse attention op over the block-sparse index
  --warmup N        untimed runs first (default 1)
  --iters N         timed runs, averaged (default 3)
)";

struct Sizes {
  int64_t q_heads, kv_heads, head_dim, last_queries, vertical, slash, near_percent, top_blocks,
      ad_block, ad_stride, mass_permille, warmup, iters;
  bool attention;
};

StatusOr<double> TimeMs(const std::function<Status()>& run, const Sizes& s) {
  for (int64_t i = 0; i < s.warmup; ++i) MP_RETURN_IF_ERROR(run());
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < s.iters; ++i) MP_RETURN_IF_ERROR(run());
  const std::chrono::duration<double, std::milli> ms = std::chrono::steady_clock::now() - start;
  return ms.count() / static_cast<double>(s.iters);
}

// A device tensor of random values in [-1, 1): one random 16 Mi-element chunk, copied over and
// over (host generation of gigabytes would dominate the run).
StatusOr<BackendTensor> Random(Backend& b, DType dtype, const Shape& shape) {
  MP_ASSIGN_OR_RETURN(BackendTensor t, b.Allocate(dtype, shape));
  const int64_t total = t.view().NumElements(), chunk = std::min<int64_t>(total, 1 << 24);
  HostTensor host(dtype, {chunk});
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int64_t i = 0; i < chunk; ++i) StoreFromFloat(host.view().data, dtype, i, dist(rng));
  MP_ASSIGN_OR_RETURN(auto flat, Reshape(t.view(), Shape{total}));
  for (int64_t at = 0; at < total; at += chunk) {
    const int64_t n = std::min(chunk, total - at);
    MP_RETURN_IF_ERROR(
        b.CopyFromHost(SliceRows(AsConst(host.view()), 0, n), SliceRows(flat, at, n)));
  }
  return t;
}

StatusOr<BackendTensor> Upload(Backend& b, const Shape& shape, const std::vector<int64_t>& v) {
  HostTensor host(DType::kI64, shape);
  std::copy(v.begin(), v.end(), host.data<int64_t>());
  MP_ASSIGN_OR_RETURN(BackendTensor t, b.Allocate(DType::kI64, shape));
  MP_RETURN_IF_ERROR(b.CopyFromHost(AsConst(host.view()), t.view()));
  return t;
}

// n sorted distinct values: the first `near` from 0 up, the rest random below `limit`.
std::vector<int64_t> Selection(int64_t n, int64_t near, int64_t limit, std::mt19937_64& rng) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < std::min(near, limit); ++i) v.push_back(i);
  while (static_cast<int64_t>(v.size()) < std::min(n, limit)) {
    const int64_t x = static_cast<int64_t>(rng() % limit);
    if (x >= near && std::find(v.begin(), v.end(), x) == v.end()) v.push_back(x);
  }
  std::sort(v.begin(), v.end());
  v.resize(n, -1);
  return v;
}

StatusOr<std::vector<int64_t>> ToHost(Backend& b, ConstTensorView t) {
  HostTensor host(DType::kI64, t.shape);
  if (host.NumElements() > 0) MP_RETURN_IF_ERROR(b.CopyToHost(t, host.view()));
  return std::vector<int64_t>(host.data<int64_t>(), host.data<int64_t>() + host.NumElements());
}

// A built index on the device.
struct IndexBuffers {
  BackendTensor range_offsets, ranges, column_offsets, columns;
  SparseIndexView view() const {
    return {range_offsets.cview(), ranges.cview(), column_offsets.cview(), columns.cview()};
  }
};

// Count pass, then the fill pass into outputs sized by it, each timed over its own runs; then
// count and fill back to back with the fill reusing the count pass (inputs_unchanged_since_count),
// timed per pass, and whether that gives the same index. Returns the times and sizes; the index
// stays in *index.
template <typename Args, typename Build>
StatusOr<nlohmann::json> TimeIndex(Backend& b, Args args, int64_t items, const Build& build,
                                   const Sizes& s, IndexBuffers* index) {
  MP_ASSIGN_OR_RETURN(index->range_offsets, b.Allocate(DType::kI64, {items + 1}));
  MP_ASSIGN_OR_RETURN(index->column_offsets, b.Allocate(DType::kI64, {items + 1}));
  args.out = {index->range_offsets.view(),
              {nullptr, DType::kI64, {0, 3}},
              index->column_offsets.view(),
              {nullptr, DType::kI64, {0, 2}}};
  const Args count_args = args;
  MP_ASSIGN_OR_RETURN(const double count_ms, TimeMs([&] { return build(args); }, s));
  HostTensor last(DType::kI64, {1});
  MP_RETURN_IF_ERROR(b.CopyToHost(SliceRows(index->range_offsets.cview(), items, 1), last.view()));
  const int64_t n_ranges = last.data<int64_t>()[0];
  MP_RETURN_IF_ERROR(b.CopyToHost(SliceRows(index->column_offsets.cview(), items, 1), last.view()));
  const int64_t n_columns = last.data<int64_t>()[0];
  MP_ASSIGN_OR_RETURN(index->ranges, b.Allocate(DType::kI64, {n_ranges, 3}));
  MP_ASSIGN_OR_RETURN(index->columns, b.Allocate(DType::kI64, {n_columns, 2}));
  args.out.ranges = index->ranges.view();
  args.out.columns = index->columns.view();
  MP_ASSIGN_OR_RETURN(const double fill_ms, TimeMs([&] { return build(args); }, s));
  MP_ASSIGN_OR_RETURN(const std::vector<int64_t> ranges, ToHost(b, index->ranges.cview()));
  MP_ASSIGN_OR_RETURN(const std::vector<int64_t> columns, ToHost(b, index->columns.cview()));

  Args fill_args = args;
  fill_args.inputs_unchanged_since_count = true;
  using Clock = std::chrono::steady_clock;
  std::chrono::duration<double, std::milli> reuse_count{0}, reuse_fill{0};
  for (int64_t i = 0; i < s.warmup + s.iters; ++i) {
    const auto t0 = Clock::now();
    MP_RETURN_IF_ERROR(build(count_args));
    const auto t1 = Clock::now();
    MP_RETURN_IF_ERROR(build(fill_args));
    if (i >= s.warmup) {
      reuse_count += t1 - t0;
      reuse_fill += Clock::now() - t1;
    }
  }
  MP_ASSIGN_OR_RETURN(const std::vector<int64_t> reused_ranges, ToHost(b, index->ranges.cview()));
  MP_ASSIGN_OR_RETURN(const std::vector<int64_t> reused_columns,
                      ToHost(b, index->columns.cview()));
  const double iters = static_cast<double>(s.iters);
  return nlohmann::json{
      {"count_ms", count_ms},
      {"fill_ms", fill_ms},
      {"reuse",
       {{"count_ms", reuse_count.count() / iters},
        {"fill_ms", reuse_fill.count() / iters},
        {"same_index", reused_ranges == ranges && reused_columns == columns}}},
      {"ranges", n_ranges},
      {"columns", n_columns},
      {"index_mib", static_cast<double>(n_ranges * 24 + n_columns * 16) / (1 << 20)}};
}

// The sparse attention op over `index` as the prefill runs it for block-sparse heads (query rows
// = key rows = positions); its time, the work it does (sparse_bench_util.h) and the density
// (visible pairs over causal pairs).
StatusOr<nlohmann::json> TimeAttention(Backend& b, const BackendTensor& q, const BackendTensor& k,
                                       const BackendTensor& v, const BackendTensor& tiles,
                                       const IndexBuffers& index, const Sizes& s) {
  const int64_t n = q.view().dim(0), n_tiles = tiles.view().dim(0);
  MP_ASSIGN_OR_RETURN(BackendTensor o, b.Allocate(DType::kF32, q.view().shape));
  MP_ASSIGN_OR_RETURN(BackendTensor lse, b.Allocate(DType::kF32, {n, s.q_heads}));
  SparseAttentionArgs a;
  a.q = q.cview();
  a.k = k.cview();
  a.v = v.cview();
  a.tiles = tiles.cview();
  a.index = index.view();
  a.o = o.view();
  a.lse = lse.view();
  MP_ASSIGN_OR_RETURN(const double ms, TimeMs(
                                           [&]() -> Status {
                                             MP_RETURN_IF_ERROR(b.SparseAttention(a));
                                             return b.Synchronize();
                                           },
                                           s));
  MP_ASSIGN_OR_RETURN(const std::vector<int64_t> range_offsets, ToHost(b, a.index.range_offsets));
  MP_ASSIGN_OR_RETURN(const std::vector<int64_t> ranges, ToHost(b, a.index.ranges));
  MP_ASSIGN_OR_RETURN(const std::vector<int64_t> column_offsets,
                      ToHost(b, a.index.column_offsets));
  MP_ASSIGN_OR_RETURN(const std::vector<int64_t> columns, ToHost(b, a.index.columns));
  const int64_t group = s.q_heads / s.kv_heads;
  const SparseWork work =
      IndexWork(range_offsets, ranges, column_offsets, columns, n_tiles, n, group);
  const double executed_flop =
      4.0 * static_cast<double>(work.executed_tiles) * 128.0 * kBenchBlockRows * s.head_dim;
  const double causal_pairs = static_cast<double>(s.kv_heads) * n * (n + 1) / 2.0;
  return nlohmann::json{
      {"ms", ms},
      {"executed_tiles", work.executed_tiles},
      {"tflops_executed", executed_flop / (ms * 1e-3) / 1e12},
      {"tflops_useful", 4.0 * work.visible_pairs * group * s.head_dim / (ms * 1e-3) / 1e12},
      {"density", work.visible_pairs / causal_pairs}};
}

// The antidiagonal selection over q and k (one run of positions [0, n)), its index over the 64-row
// tiles and, with --attention, the sparse attention op over that index, into `out`.
Status BenchAntidiagonal(Backend& b, const Sizes& s, const BackendTensor& q, const BackendTensor& k,
                         const BackendTensor& d_tiles, const BackendTensor& d_runs,
                         nlohmann::json* out) {
  const int64_t n = q.view().dim(0), kv = s.kv_heads, block = s.ad_block, stride = s.ad_stride;
  const int64_t n_qb = (n + block - 1) / block, rows = block / stride;
  MP_ASSIGN_OR_RETURN(BackendTensor kept, b.Allocate(DType::kI32, {kv, n_qb, n_qb / 32 + 1}));
  const std::vector<int64_t> permille(static_cast<size_t>(kv), s.mass_permille);
  AntidiagonalSelectArgs a;
  a.q = q.cview();
  a.q_runs = d_runs.cview();
  a.k = k.cview();
  a.k_runs = d_runs.cview();
  a.length = n;
  a.block = block;
  a.stride = stride;
  a.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  a.permille = permille.data();
  a.kept = kept.view();
  MP_ASSIGN_OR_RETURN(const double select_ms, TimeMs(
                                                  [&]() -> Status {
                                                    MP_RETURN_IF_ERROR(b.AntidiagonalSelect(a));
                                                    return b.Synchronize();
                                                  },
                                                  s));
  // Two passes of tensor-core products: per query head, reshaped row A = qb * R + r against key
  // rows 0..A, stride * head_dim multiply-adds each.
  double row_pairs = 0;
  for (int64_t qb = 0; qb < n_qb; ++qb)
    for (int64_t r = 0; r < rows; ++r)
      row_pairs += static_cast<double>(std::min(qb * rows + r, (n + stride - 1) / stride - 1) + 1);
  const double flop = 2.0 * 2.0 * row_pairs * static_cast<double>(stride * s.head_dim * s.q_heads);
  (*out)["antidiagonal_select"] = {{"ms", select_ms},
                                   {"block", block},
                                   {"stride", stride},
                                   {"mass_permille", s.mass_permille},
                                   {"tflops", flop / (select_ms * 1e-3) / 1e12}};
  BlockMaskIndexArgs m;
  m.tiles = d_tiles.cview();
  m.runs = d_runs.cview();
  m.kept = kept.cview();
  m.block = block;
  m.heads = permille.data();
  IndexBuffers index;
  MP_ASSIGN_OR_RETURN(
      (*out)["antidiagonal_index"],
      TimeIndex(
          b, m, kv * d_tiles.view().dim(0),
          [&](const BlockMaskIndexArgs& x) { return b.BlockMaskIndex(x); }, s, &index));
  if (!s.attention) return OkStatus();
  MP_ASSIGN_OR_RETURN(BackendTensor v, Random(b, DType::kBF16, k.view().shape));
  MP_ASSIGN_OR_RETURN((*out)["antidiagonal_attention"],
                      TimeAttention(b, q, k, v, d_tiles, index, s));
  const nlohmann::json& ix = (*out)["antidiagonal_index"];
  (*out)["antidiagonal_layer_ms"] = {
      {"total_with_reuse", select_ms + ix["reuse"]["count_ms"].get<double>() +
                               ix["reuse"]["fill_ms"].get<double>() +
                               (*out)["antidiagonal_attention"]["ms"].get<double>()}};
  return OkStatus();
}

// Every timing at prompt length n, as one JSON object.
StatusOr<nlohmann::json> BenchTokens(const Sizes& s, int64_t n) {
  MP_REQUIRE(n > s.last_queries, "--tokens ", n, " must exceed --last-queries");
  MP_ASSIGN_OR_RETURN(std::unique_ptr<Backend> b, CreateBackend(BackendKind::kCuda, 0));
  const int64_t kv = s.kv_heads, group = s.q_heads / s.kv_heads;
  const int64_t n_tiles = (n + 63) / 64, num_blocks = n_tiles;
  // The attention op takes q in F32, as the prefill holds it (the block sums then read that too).
  const DType q_dtype = s.attention ? DType::kF32 : DType::kBF16;
  MP_ASSIGN_OR_RETURN(BackendTensor q, Random(*b, q_dtype, {n, s.q_heads, s.head_dim}));
  MP_ASSIGN_OR_RETURN(BackendTensor k, Random(*b, DType::kBF16, {n, kv, s.head_dim}));
  std::vector<int64_t> tiles, positions(static_cast<size_t>(n));
  for (int64_t t = 0; t < n_tiles; ++t)
    tiles.insert(tiles.end(), {64 * t, std::min(n, 64 * t + 64), 64 * t});
  for (int64_t i = 0; i < n; ++i) positions[static_cast<size_t>(i)] = i;
  MP_ASSIGN_OR_RETURN(BackendTensor d_tiles, Upload(*b, {n_tiles, 3}, tiles));
  MP_ASSIGN_OR_RETURN(BackendTensor d_runs, Upload(*b, {1, 3}, {0, n, 0}));
  MP_ASSIGN_OR_RETURN(BackendTensor k_pos, Upload(*b, {n}, positions));
  nlohmann::json out{{"bench", "sparse_index"},  {"tokens", n},
                     {"kv_heads", kv},           {"q_heads", s.q_heads},
                     {"head_dim", s.head_dim},   {"iters", s.iters},
                     {"q_dtype", DTypeName(q_dtype)}};

  // Vertical and slash scores of the last queries (their lse: a stand-in, any finite value).
  const int64_t n_q = s.last_queries;
  MP_ASSIGN_OR_RETURN(BackendTensor last_q, Random(*b, DType::kF32, {n_q, s.q_heads, s.head_dim}));
  MP_ASSIGN_OR_RETURN(BackendTensor lse, Random(*b, DType::kF32, {n_q, s.q_heads}));
  MP_ASSIGN_OR_RETURN(
      BackendTensor q_pos,
      Upload(*b, {n_q}, std::vector<int64_t>(positions.end() - n_q, positions.end())));
  MP_ASSIGN_OR_RETURN(BackendTensor score, b->Allocate(DType::kF32, {kv, n}));
  MP_ASSIGN_OR_RETURN(BackendTensor diag_score, b->Allocate(DType::kF32, {kv, n}));
  MP_ASSIGN_OR_RETURN(out["key_scores_with_diagonals_ms"],
                      TimeMs(
                          [&]() -> Status {
                            MP_RETURN_IF_ERROR(b->KeyScores(
                                {last_q.cview(), q_pos.cview(), k.cview(), k_pos.cview(),
                                 lse.cview(), 0.0f, score.view(), diag_score.view()}));
                            return b->Synchronize();
                          },
                          s));

  std::mt19937_64 rng(11);
  std::vector<int64_t> columns, diagonals;
  for (int64_t g = 0; g < kv; ++g) {
    const auto c = Selection(s.vertical, 4, n, rng);
    const auto d = Selection(s.slash, s.slash * s.near_percent / 100, n, rng);
    columns.insert(columns.end(), c.begin(), c.end());
    diagonals.insert(diagonals.end(), d.begin(), d.end());
  }
  MP_ASSIGN_OR_RETURN(BackendTensor d_columns, Upload(*b, {kv, s.vertical}, columns));
  MP_ASSIGN_OR_RETURN(BackendTensor d_diagonals, Upload(*b, {kv, s.slash}, diagonals));
  VerticalSlashIndexArgs vs;
  vs.tiles = d_tiles.cview();
  vs.runs = d_runs.cview();
  vs.columns = d_columns.cview();
  vs.diagonals = d_diagonals.cview();
  IndexBuffers vs_index;
  MP_ASSIGN_OR_RETURN(
      out["vertical_slash_index"],
      TimeIndex(
          *b, vs, kv * n_tiles,
          [&](const VerticalSlashIndexArgs& a) { return b->VerticalSlashIndex(a); }, s,
          &vs_index));
  vs_index = {};  // not needed further: its memory goes back

  MP_ASSIGN_OR_RETURN(BackendTensor q_sums, b->Allocate(DType::kF32, {num_blocks, kv, s.head_dim}));
  MP_ASSIGN_OR_RETURN(BackendTensor k_sums, b->Allocate(DType::kF32, {num_blocks, kv, s.head_dim}));
  MP_ASSIGN_OR_RETURN(BackendTensor q_counts, b->Allocate(DType::kF32, {num_blocks}));
  MP_ASSIGN_OR_RETURN(BackendTensor k_counts, b->Allocate(DType::kF32, {num_blocks}));
  MP_ASSIGN_OR_RETURN(out["block_sums_q_ms"],
                      TimeMs(
                          [&] {
                            return b->BlockSums({q.cview(), d_runs.cview(), 64, group,
                                                 q_sums.view(), q_counts.view()});
                          },
                          s));
  MP_ASSIGN_OR_RETURN(
      out["block_sums_k_ms"],
      TimeMs(
          [&] {
            return b->BlockSums({k.cview(), d_runs.cview(), 64, 1, k_sums.view(), k_counts.view()});
          },
          s));
  const std::vector<int64_t> top(static_cast<size_t>(kv), s.top_blocks);
  BlockSparseIndexArgs bs;
  bs.tiles = d_tiles.cview();
  bs.runs = d_runs.cview();
  bs.q_sums = q_sums.cview();
  bs.q_counts = q_counts.cview();
  bs.k_sums = k_sums.cview();
  bs.k_counts = k_counts.cview();
  bs.group = group;
  bs.top_blocks = top.data();
  IndexBuffers bs_index;
  MP_ASSIGN_OR_RETURN(
      out["block_sparse_index"],
      TimeIndex(
          *b, bs, kv * n_tiles,
          [&](const BlockSparseIndexArgs& a) { return b->BlockSparseIndex(a); }, s, &bs_index));
  if (s.attention) {
    MP_ASSIGN_OR_RETURN(BackendTensor v, Random(*b, DType::kBF16, {n, kv, s.head_dim}));
    MP_ASSIGN_OR_RETURN(out["block_sparse_attention"],
                        TimeAttention(*b, q, k, v, d_tiles, bs_index, s));
    // One layer's block-sparse heads: pooling, index (count + fill) and attention.
    const nlohmann::json& index = out["block_sparse_index"];
    const double sums_ms =
        out["block_sums_q_ms"].get<double>() + out["block_sums_k_ms"].get<double>();
    const double attention_ms = out["block_sparse_attention"]["ms"].get<double>();
    out["block_sparse_layer_ms"] = {
        {"total", sums_ms + index["count_ms"].get<double>() + index["fill_ms"].get<double>() +
                      attention_ms},
        {"total_with_reuse", sums_ms + index["reuse"]["count_ms"].get<double>() +
                                 index["reuse"]["fill_ms"].get<double>() + attention_ms}};
  }
  MP_RETURN_IF_ERROR(BenchAntidiagonal(*b, s, q, k, d_tiles, d_runs, &out));
  return out;
}

Status Run(int argc, char** argv) {
  MP_ASSIGN_OR_RETURN(const Flags flags, Flags::Parse(argc, argv, {"help", "attention"}));
  if (flags.GetBool("help")) {
    std::cout << kUsage;
    return OkStatus();
  }
  MP_RETURN_IF_ERROR(
      flags.CheckKnown({"help", "tokens", "q-heads", "kv-heads", "head-dim", "last-queries",
                        "vertical", "slash", "near-percent", "top-blocks", "ad-block", "ad-stride",
                        "mass-permille", "attention", "warmup", "iters"}));
  Sizes s{};
  MP_ASSIGN_OR_RETURN(const std::vector<int64_t> tokens,
                      ParsePositiveList(flags.Get("tokens").value_or("1048576"), "--tokens"));
  MP_ASSIGN_OR_RETURN(s.q_heads, flags.GetInt("q-heads", 32));
  MP_ASSIGN_OR_RETURN(s.kv_heads, flags.GetInt("kv-heads", 8));
  MP_ASSIGN_OR_RETURN(s.head_dim, flags.GetInt("head-dim", 128));
  MP_ASSIGN_OR_RETURN(s.last_queries, flags.GetInt("last-queries", 64));
  MP_ASSIGN_OR_RETURN(s.vertical, flags.GetInt("vertical", 1000));
  MP_ASSIGN_OR_RETURN(s.slash, flags.GetInt("slash", 6096));
  MP_ASSIGN_OR_RETURN(s.near_percent, flags.GetInt("near-percent", 90));
  MP_ASSIGN_OR_RETURN(s.top_blocks, flags.GetInt("top-blocks", 100));
  MP_ASSIGN_OR_RETURN(s.ad_block, flags.GetInt("ad-block", 128));
  MP_ASSIGN_OR_RETURN(s.ad_stride, flags.GetInt("ad-stride", 8));
  MP_ASSIGN_OR_RETURN(s.mass_permille, flags.GetInt("mass-permille", 900));
  MP_ASSIGN_OR_RETURN(s.warmup, flags.GetInt("warmup", 1));
  MP_ASSIGN_OR_RETURN(s.iters, flags.GetInt("iters", 3));
  s.attention = flags.GetBool("attention");
  MP_REQUIRE(s.last_queries > 0 && s.kv_heads > 0 && s.q_heads % s.kv_heads == 0 &&
                 s.head_dim > 0 && s.vertical >= 0 && s.slash >= 0 && s.near_percent >= 0 &&
                 s.near_percent <= 100 && s.top_blocks > 0 && s.iters > 0 && s.ad_block > 0 &&
                 s.ad_stride > 0 && s.mass_permille > 0 && s.warmup >= 0,
             "bad sizes (see --help)");
  if (tokens.size() == 1) {
    MP_ASSIGN_OR_RETURN(const nlohmann::json out, BenchTokens(s, tokens[0]));
    std::cout << out.dump(2) << "\n";
    return OkStatus();
  }
  nlohmann::json out{{"bench", "sparse_index"}, {"results", nlohmann::json::array()}};
  for (const int64_t n : tokens) {
    MP_ASSIGN_OR_RETURN(nlohmann::json r, BenchTokens(s, n));
    out["results"].push_back(std::move(r));
  }
  std::cout << out.dump(2) << "\n";
  return OkStatus();
}

}  // namespace
}  // namespace millipede

int main(int argc, char** argv) {
  const millipede::Status status = millipede::Run(argc, argv);
  if (!status.ok()) {
    std::cerr << "millipede-bench-sparse-index: " << status.ToString() << "\n";
    return 1;
  }
  return 0;
}
