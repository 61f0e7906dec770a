// millipede-bench-sparse-attention: times SparseAttentionCuda on one layer's shapes with a
// vertical-slash-like index, beside dense causal AttentionCuda on the same tensors, and prints
// one JSON object. Per KV head the index selects `vertical` columns (the first 64 positions and
// random ones) and `slash` diagonals (the first `local` offsets, a band under the diagonal, and
// the rest in clusters of `cluster` adjacent offsets at random distances), turned into each
// 64-position tile's merged bands and remaining columns as MInference's Algorithm 4 does. The
// index is built on the host (threads) and copied to the device; its build is not timed.
// Reported: time, executed tiles (128 keys x 128 packed rows, what the Hopper kernel computes,
// padding of partial chunks included), TFLOP/s on executed tiles and on the visible (query,
// key) pairs alone, density (visible pairs over causal pairs).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/cuda_check.h"
#include "common/dtype.h"
#include "common/flags.h"
#include "kernels/attention/attention_cuda.h"
#include "kernels/attention/sparse_attention_cuda.h"
#include "tests/bench/bench_cuda_util.h"
#include "tests/bench/sparse_bench_util.h"

namespace millipede {
namespace {

constexpr char kUsage[] = R"(usage: millipede-bench-sparse-attention [options]

  --seqs L        comma-separated sequence lengths (default 131072,524288,1048576)
  --q-heads H     query heads (default 32)
  --kv-heads H    key/value heads (default 8)
  --head-dim D    (default 128)
  --dtype T       K/V dtype: bf16 (default) | fp16
  --vertical N    columns per KV head (default 1000)
  --slash N       diagonals per KV head (default 6096)
  --local N       of which the first N offsets (default 4096)
  --cluster N     the others in clusters of N adjacent offsets (default 16)
  --dense-max S   also time dense causal attention up to length S (default 1048576; 0: never)
  --kernel K      auto (default; the Hopper kernel where it runs) | cuda-cores
  --warmup N      untimed sparse runs first (default 2)
  --iters N       timed sparse runs, averaged (default 5)
  --dense-iters N timed dense runs after one untimed (default 1)
  --pattern-out D also write each length's columns and diagonal offsets per KV head to
                  D/vertical-slash-SEQ.json (tests/bench/sparse_peers.py --patterns D runs
                  MInference's kernel on the same index)
)";

constexpr int64_t kTile = kSparseTileRows;

struct Settings {
  int64_t q_heads, kv_heads, head_dim, vertical, slash, local, cluster, dense_max;
  int64_t warmup, iters, dense_iters;
  DType dtype;
  bool allow_wgmma;
};

// One KV head's selection: diagonal offset intervals [d0, d1] in decreasing order (so that
// their bands come in increasing position) and sorted column positions.
struct HeadPattern {
  std::vector<std::pair<int64_t, int64_t>> diagonals;
  std::vector<int64_t> columns;
};

HeadPattern MakePattern(const Settings& s, int64_t seq, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> offset(s.local, std::max(s.local, seq - 1));
  std::vector<std::pair<int64_t, int64_t>> d = {{0, std::max<int64_t>(s.local, 1) - 1}};
  for (int64_t left = s.slash - s.local; left > 0; left -= s.cluster) {
    const int64_t d0 = offset(rng);
    d.push_back({d0, d0 + std::min(left, s.cluster) - 1});
  }
  std::sort(d.begin(), d.end());
  HeadPattern p;
  for (const auto& [d0, d1] : d)  // merge overlapping or adjacent clusters
    if (!p.diagonals.empty() && d0 <= p.diagonals.back().second + 1)
      p.diagonals.back().second = std::max(p.diagonals.back().second, d1);
    else
      p.diagonals.push_back({d0, d1});
  std::reverse(p.diagonals.begin(), p.diagonals.end());
  // Exactly min(vertical, seq) distinct columns: the first 64, then random ones.
  std::uniform_int_distribution<int64_t> position(0, seq - 1);
  std::set<int64_t> columns;
  for (int64_t c = 0; c < std::min<int64_t>({64, s.vertical, seq}); ++c) columns.insert(c);
  while (static_cast<int64_t>(columns.size()) < std::min(s.vertical, seq))
    columns.insert(position(rng));
  p.columns.assign(columns.begin(), columns.end());
  return p;
}

// The index (key rows = positions) with what the report needs.
struct HostIndex {
  std::vector<int64_t> tiles, range_offsets, ranges, column_offsets, columns;
  double visible_pairs = 0;    // (query position, key) pairs per KV head, summed
  int64_t executed_tiles = 0;  // 128 x 128 tiles of the Hopper kernel
};

// Item (g, t)'s merged bands [lo, hi] and columns, in position order, through the callbacks.
template <typename Range, typename Column>
void ItemKeys(const HeadPattern& p, int64_t a, int64_t b, Range range, Column column) {
  int64_t lo = -1, hi = -2;
  std::vector<std::pair<int64_t, int64_t>> bands;
  for (const auto& [d0, d1] : p.diagonals) {
    const int64_t band_lo = std::max<int64_t>(0, a - d1), band_hi = b - d0;
    if (band_hi < band_lo) continue;
    if (band_lo <= hi + 1) {
      hi = std::max(hi, band_hi);
      continue;
    }
    if (hi >= lo) bands.push_back({lo, hi});
    lo = band_lo;
    hi = band_hi;
  }
  if (hi >= lo) bands.push_back({lo, hi});
  for (const auto& [l, h] : bands) range(l, h);
  size_t r = 0;
  for (int64_t c : p.columns) {
    if (c > b) break;
    while (r < bands.size() && bands[r].second < c) ++r;
    if (r < bands.size() && bands[r].first <= c) continue;
    column(c);
  }
}

// Runs body(first, last) over [0, n) in one chunk per hardware thread.
void ParallelChunks(int64_t n, const std::function<void(int64_t, int64_t)>& body) {
  const int64_t threads = std::max<int64_t>(1, std::thread::hardware_concurrency());
  const int64_t per = (n + threads - 1) / threads;
  std::vector<std::thread> pool;
  for (int64_t begin = 0; begin < n; begin += per)
    pool.emplace_back(body, begin, std::min(n, begin + per));
  for (std::thread& t : pool) t.join();
}

std::vector<HeadPattern> MakePatterns(const Settings& s, int64_t seq) {
  std::vector<HeadPattern> heads;
  for (int64_t g = 0; g < s.kv_heads; ++g) heads.push_back(MakePattern(s, seq, 1000 + g));
  return heads;
}

// The selection as MInference's vertical-slash kernel takes it, for running a peer on the same
// index: per KV head the column positions and every selected diagonal offset (0 = the main
// diagonal; a key at query - offset), written to DIR/vertical-slash-SEQ.json.
Status WritePatterns(const Settings& s, int64_t seq, const std::string& dir) {
  nlohmann::json out{{"seq", seq}, {"kv_heads", s.kv_heads}, {"vertical", s.vertical},
                     {"slash", s.slash}, {"local", s.local}, {"cluster", s.cluster}};
  for (const HeadPattern& p : MakePatterns(s, seq)) {
    std::vector<int64_t> offsets;
    for (const auto& [d0, d1] : p.diagonals)
      for (int64_t d = d0; d <= d1 && d < seq; ++d) offsets.push_back(d);
    out["columns"].push_back(p.columns);
    out["diagonals"].push_back(offsets);
  }
  const std::string path = dir + "/vertical-slash-" + std::to_string(seq) + ".json";
  std::ofstream file(path);
  file << out.dump() << "\n";
  MP_REQUIRE(file.good(), "cannot write ", path);
  return OkStatus();
}

HostIndex BuildIndex(const Settings& s, int64_t seq) {
  const std::vector<HeadPattern> heads = MakePatterns(s, seq);
  const int64_t n_tiles = (seq + kTile - 1) / kTile, items = s.kv_heads * n_tiles;
  HostIndex index;
  for (int64_t t = 0; t < n_tiles; ++t)
    index.tiles.insert(index.tiles.end(), {t * kTile, std::min(seq, (t + 1) * kTile), t * kTile});
  // Counts, visible pairs and executed tiles per item, then offsets, then the contents.
  std::vector<int64_t> n_ranges(items), n_columns(items), executed(items);
  std::vector<double> pairs(items);
  auto bounds = [&](int64_t i) {
    const int64_t a = (i % n_tiles) * kTile;
    return std::make_pair(a, std::min(seq, a + kTile) - 1);
  };
  ParallelChunks(items, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) {
      const auto [a, b] = bounds(i);
      int64_t chunks = 0;
      ItemKeys(
          heads[i / n_tiles], a, b,
          [&](int64_t lo, int64_t hi) {
            ++n_ranges[i];
            chunks += (hi - lo + 1 + kBenchKeyChunk - 1) / kBenchKeyChunk;
            pairs[i] += VisiblePairs(lo, hi, a, b);
          },
          [&](int64_t c) {
            ++n_columns[i];
            pairs[i] += b - std::max(a, c) + 1;
          });
      chunks += (n_columns[i] + kBenchKeyChunk - 1) / kBenchKeyChunk;
      executed[i] = ExecutedTiles(chunks, s.q_heads / s.kv_heads);
    }
  });
  index.range_offsets.assign(items + 1, 0);
  index.column_offsets.assign(items + 1, 0);
  for (int64_t i = 0; i < items; ++i) {
    index.range_offsets[i + 1] = index.range_offsets[i] + n_ranges[i];
    index.column_offsets[i + 1] = index.column_offsets[i] + n_columns[i];
    index.visible_pairs += pairs[i];
    index.executed_tiles += executed[i];
  }
  index.ranges.resize(3 * index.range_offsets.back());
  index.columns.resize(2 * index.column_offsets.back());
  ParallelChunks(items, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) {
      const auto [a, b] = bounds(i);
      int64_t* r = &index.ranges[3 * index.range_offsets[i]];
      int64_t* c = &index.columns[2 * index.column_offsets[i]];
      ItemKeys(
          heads[i / n_tiles], a, b,
          [&](int64_t lo, int64_t hi) {
            *r++ = lo;
            *r++ = hi + 1;
            *r++ = lo;
          },
          [&](int64_t col) {
            *c++ = col;
            *c++ = col;
          });
    }
  });
  return index;
}

// A host I64 vector on the device, as a [n / width, width] (or [n]) view.
StatusOr<ConstTensorView> Upload(const std::vector<int64_t>& host, int64_t width,
                                 DeviceBuffer* buffer) {
  MP_RETURN_IF_ERROR(buffer->Allocate(std::max<size_t>(8, host.size() * 8)));
  if (!host.empty())
    MP_CUDA_CHECK(cudaMemcpy(buffer->data(), host.data(), host.size() * 8, cudaMemcpyHostToDevice));
  const int64_t n = static_cast<int64_t>(host.size());
  return ConstTensorView{buffer->data(), DType::kI64,
                         width == 1 ? Shape{n} : Shape{n / width, width}};
}

StatusOr<nlohmann::json> BenchSeq(const Settings& s, int64_t seq) {
  const HostIndex index = BuildIndex(s, seq);
  const Shape q_shape{seq, s.q_heads, s.head_dim}, kv_shape{seq, s.kv_heads, s.head_dim};
  DeviceBuffer q, k, v, o, lse, tiles, roff, ranges, coff, columns;
  MP_RETURN_IF_ERROR(FillRandomRepeated(&q, DType::kF32, q_shape, 1));
  MP_RETURN_IF_ERROR(FillRandomRepeated(&k, s.dtype, kv_shape, 2));
  MP_RETURN_IF_ERROR(FillRandomRepeated(&v, s.dtype, kv_shape, 3));
  MP_RETURN_IF_ERROR(o.Allocate(q_shape.NumElements() * sizeof(float)));
  MP_RETURN_IF_ERROR(lse.Allocate(seq * s.q_heads * sizeof(float)));
  SparseAttentionArgs args;
  args.q = {q.data(), DType::kF32, q_shape};
  args.k = {k.data(), s.dtype, kv_shape};
  args.v = {v.data(), s.dtype, kv_shape};
  args.o = {o.data(), DType::kF32, q_shape};
  args.lse = {lse.data(), DType::kF32, {seq, s.q_heads}};
  MP_ASSIGN_OR_RETURN(args.tiles, Upload(index.tiles, 3, &tiles));
  MP_ASSIGN_OR_RETURN(args.index.range_offsets, Upload(index.range_offsets, 1, &roff));
  MP_ASSIGN_OR_RETURN(args.index.ranges, Upload(index.ranges, 3, &ranges));
  MP_ASSIGN_OR_RETURN(args.index.column_offsets, Upload(index.column_offsets, 1, &coff));
  MP_ASSIGN_OR_RETURN(args.index.columns, Upload(index.columns, 2, &columns));
  SparseAttentionCudaOptions options;
  options.allow_wgmma = s.allow_wgmma;
  MP_ASSIGN_OR_RETURN(
      const double ms,
      TimeMs([&] { return SparseAttentionCuda(args, options, nullptr); }, s.warmup, s.iters));
  const int64_t group = s.q_heads / s.kv_heads;
  const double executed_flop = 4.0 * index.executed_tiles * 128.0 * kBenchBlockRows * s.head_dim;
  const double useful_flop = 4.0 * index.visible_pairs * group * s.head_dim;
  const double causal_pairs = static_cast<double>(s.kv_heads) * seq * (seq + 1) / 2.0;
  const int64_t index_bytes =
      8 *
      static_cast<int64_t>(index.tiles.size() + index.range_offsets.size() + index.ranges.size() +
                           index.column_offsets.size() + index.columns.size());
  nlohmann::json result{
      {"seq", seq},
      {"ranges", index.ranges.size() / 3},
      {"columns", index.columns.size() / 2},
      {"index_bytes", index_bytes},
      {"sparse",
       {{"ms", ms},
        {"executed_tiles", index.executed_tiles},
        {"tflops_executed", executed_flop / (ms * 1e-3) / 1e12},
        {"tflops_useful", useful_flop / (ms * 1e-3) / 1e12},
        {"density", index.visible_pairs / causal_pairs},
        {"executed_density", executed_flop / (4.0 * causal_pairs * group * s.head_dim)}}}};
  if (seq <= s.dense_max) {
    const AttentionArgs dense{args.q, args.k, args.v,  0, 0, AttentionMask::kCausal,
                              0.0f,   args.o, args.lse};
    MP_ASSIGN_OR_RETURN(const double dense_ms,
                        TimeMs([&] { return AttentionCuda(dense, nullptr); }, 1, s.dense_iters));
    const double dense_flop = 4.0 * causal_pairs * group * s.head_dim;
    result["dense"] = {{"ms", dense_ms}, {"tflops", dense_flop / (dense_ms * 1e-3) / 1e12}};
    result["speedup_vs_dense"] = dense_ms / ms;
  }
  return result;
}

Status Run(int argc, char** argv) {
  MP_ASSIGN_OR_RETURN(const Flags flags, Flags::Parse(argc, argv, {"help"}));
  if (flags.GetBool("help")) {
    std::cout << kUsage;
    return OkStatus();
  }
  MP_RETURN_IF_ERROR(flags.CheckKnown({"help", "seqs", "q-heads", "kv-heads", "head-dim", "dtype",
                                       "vertical", "slash", "local", "cluster", "dense-max",
                                       "kernel", "warmup", "iters", "dense-iters",
                                       "pattern-out"}));
  Settings s;
  MP_ASSIGN_OR_RETURN(s.q_heads, flags.GetInt("q-heads", 32));
  MP_ASSIGN_OR_RETURN(s.kv_heads, flags.GetInt("kv-heads", 8));
  MP_ASSIGN_OR_RETURN(s.head_dim, flags.GetInt("head-dim", 128));
  MP_ASSIGN_OR_RETURN(s.vertical, flags.GetInt("vertical", 1000));
  MP_ASSIGN_OR_RETURN(s.slash, flags.GetInt("slash", 6096));
  MP_ASSIGN_OR_RETURN(s.local, flags.GetInt("local", 4096));
  MP_ASSIGN_OR_RETURN(s.cluster, flags.GetInt("cluster", 16));
  MP_ASSIGN_OR_RETURN(s.dense_max, flags.GetInt("dense-max", 1048576));
  MP_ASSIGN_OR_RETURN(s.warmup, flags.GetInt("warmup", 2));
  MP_ASSIGN_OR_RETURN(s.iters, flags.GetInt("iters", 5));
  MP_ASSIGN_OR_RETURN(s.dense_iters, flags.GetInt("dense-iters", 1));
  MP_ASSIGN_OR_RETURN(s.dtype, ParseFloatDTypeName(flags.Get("dtype").value_or("bf16")));
  MP_REQUIRE(s.dtype == DType::kBF16 || s.dtype == DType::kF16, "--dtype must be bf16 or fp16");
  const std::string kernel = flags.Get("kernel").value_or("auto");
  MP_REQUIRE(kernel == "auto" || kernel == "cuda-cores", "--kernel must be auto or cuda-cores");
  s.allow_wgmma = kernel == "auto";
  MP_ASSIGN_OR_RETURN(const std::vector<int64_t> seqs,
                      ParsePositiveList(flags.Get("seqs").value_or("131072,524288,1048576"),
                                        "--seqs"));
  MP_REQUIRE(s.q_heads > 0 && s.kv_heads > 0 && s.q_heads % s.kv_heads == 0 && s.head_dim > 0 &&
                 s.vertical >= 0 && s.local >= 1 && s.slash >= s.local && s.cluster > 0 &&
                 s.iters > 0 && s.warmup >= 0 && s.dense_iters > 0,
             "bad settings (see --help)");

  int device = 0;
  cudaDeviceProp prop{};
  MP_CUDA_CHECK(cudaGetDevice(&device));
  MP_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  nlohmann::json out{
      {"bench", "sparse_attention"}, {"device", prop.name},    {"q_heads", s.q_heads},
      {"kv_heads", s.kv_heads},      {"head_dim", s.head_dim}, {"dtype", DTypeName(s.dtype)},
      {"vertical", s.vertical},      {"slash", s.slash},       {"local", s.local},
      {"cluster", s.cluster},        {"kernel", kernel},       {"iters", s.iters}};
  const std::string pattern_out = flags.Get("pattern-out").value_or("");
  for (const int64_t seq : seqs) {
    if (!pattern_out.empty()) MP_RETURN_IF_ERROR(WritePatterns(s, seq, pattern_out));
    MP_ASSIGN_OR_RETURN(nlohmann::json r, BenchSeq(s, seq));
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
    std::cerr << "millipede-bench-sparse-attention: " << status.ToString() << "\n";
    return 1;
  }
  return 0;
}
