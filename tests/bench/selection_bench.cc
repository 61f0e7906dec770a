// millipede-bench-selection: times the CUDA backend's selection ops and copy queue, as the engine
// calls them (each call followed by the wait the engine would do), and prints one JSON object:
// TopK over [rows, cols] scores, KeyScores of observed queries over a rank's keys, GatherRows
// of selected K rows from device and from page-locked host memory, and copies host <-> device
// alone and beside a compute op (the overlap the copy queue is for), and an OmniKV filter layer's
// token selection (TokenScores, TopK in column order, SelectionIndex) over the keys, and the two
// ways to load a group of OmniKV's selected layers from the host tier (a gather kernel reading
// page-locked host memory, as the engine does, against the rows gathered by host threads into a
// packed page-locked buffer and copied over in one transfer). Wall-clock milliseconds per call,
// averaged after warm-up runs.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/flags.h"
#include "worker/backend/backend.h"
#include "worker/backend/backend_factory.h"

namespace millipede {
namespace {

constexpr char kUsage[] = R"(usage: millipede-bench-selection [options]

  --rows R         top-k rows (default 8: one per KV head)
  --cols C         top-k columns (default 1048576)
  --k K            top-k k (default 16384)
  --keys N         keys of KeyScores and rows of the gathers (default 131072)
  --queries Q      observed queries of KeyScores (default 64)
  --q-heads H      query heads (default 32)
  --kv-heads H     key/value heads (default 8)
  --head-dim D     (default 128)
  --copy-mib M     size of the timed copies (default 256)
  --load-layers L  selected layers of one host-tier load group (default 6); each loads --k rows
                   per KV head (K and V) of a host tier of --keys rows
  --load-threads T host threads of the packed-copy load (default: the cores, at most 16)
  --warmup N       untimed runs first (default 2)
  --iters N        timed runs, averaged (default 5)
)";

struct Sizes {
  int64_t rows, cols, k, keys, queries, q_heads, kv_heads, head_dim, copy_mib, warmup, iters;
  int64_t load_layers, load_threads;
};

// Milliseconds per call of `run` (which must include its own wait).
StatusOr<double> TimeMs(const std::function<Status()>& run, const Sizes& s) {
  for (int64_t i = 0; i < s.warmup; ++i) MP_RETURN_IF_ERROR(run());
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < s.iters; ++i) MP_RETURN_IF_ERROR(run());
  const std::chrono::duration<double, std::milli> ms = std::chrono::steady_clock::now() - start;
  return ms.count() / static_cast<double>(s.iters);
}

// A backend tensor holding uniform values in [-1, 1) (float dtypes) from a fixed seed.
StatusOr<BackendTensor> Random(Backend& b, DType dtype, const Shape& shape, uint64_t seed) {
  HostTensor host(dtype, shape);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int64_t i = 0; i < host.NumElements(); ++i)
    StoreFromFloat(host.view().data, dtype, static_cast<size_t>(i), dist(rng));
  MP_ASSIGN_OR_RETURN(BackendTensor t, b.Allocate(dtype, shape));
  MP_RETURN_IF_ERROR(b.CopyFromHost(AsConst(host.view()), t.view()));
  return t;
}

StatusOr<BackendTensor> Positions(Backend& b, int64_t begin, int64_t n) {
  HostTensor host(DType::kI64, {n});
  for (int64_t i = 0; i < n; ++i) host.data<int64_t>()[i] = begin + i;
  MP_ASSIGN_OR_RETURN(BackendTensor t, b.Allocate(DType::kI64, {n}));
  MP_RETURN_IF_ERROR(b.CopyFromHost(AsConst(host.view()), t.view()));
  return t;
}

StatusOr<nlohmann::json> BenchTopK(Backend& b, const Sizes& s) {
  MP_ASSIGN_OR_RETURN(BackendTensor scores, Random(b, DType::kF32, {s.rows, s.cols}, 1));
  MP_ASSIGN_OR_RETURN(BackendTensor index, b.Allocate(DType::kI32, {s.rows, s.k}));
  MP_ASSIGN_OR_RETURN(BackendTensor value, b.Allocate(DType::kF32, {s.rows, s.k}));
  MP_ASSIGN_OR_RETURN(
      const double ms,
      TimeMs(
          [&]() -> Status {
            MP_RETURN_IF_ERROR(b.TopK({scores.cview(), s.k, index.view(), value.view()}));
            return b.Synchronize();
          },
          s));
  return nlohmann::json{{"rows", s.rows},
                        {"cols", s.cols},
                        {"k", s.k},
                        {"ms", ms},
                        {"gb_per_s_one_read", s.rows * s.cols * 4 / (ms * 1e-3) / 1e9}};
}

StatusOr<nlohmann::json> BenchKeyScores(Backend& b, const Sizes& s, BackendTensor& k) {
  MP_ASSIGN_OR_RETURN(BackendTensor q,
                      Random(b, DType::kF32, {s.queries, s.q_heads, s.head_dim}, 2));
  MP_ASSIGN_OR_RETURN(BackendTensor lse, Random(b, DType::kF32, {s.queries, s.q_heads}, 3));
  MP_ASSIGN_OR_RETURN(BackendTensor q_pos, Positions(b, s.keys - s.queries, s.queries));
  MP_ASSIGN_OR_RETURN(BackendTensor k_pos, Positions(b, 0, s.keys));
  MP_ASSIGN_OR_RETURN(BackendTensor score, b.Allocate(DType::kF32, {s.kv_heads, s.keys}));
  MP_ASSIGN_OR_RETURN(const double ms, TimeMs(
                                           [&]() -> Status {
                                             MP_RETURN_IF_ERROR(b.KeyScores(
                                                 {q.cview(), q_pos.cview(), k.cview(),
                                                  k_pos.cview(), lse.cview(), 0.0f, score.view(),
                                                  {}}));
                                             return b.Synchronize();
                                           },
                                           s));
  const double flops = 2.0 * s.queries * s.q_heads * s.keys * s.head_dim;
  return nlohmann::json{{"queries", s.queries},
                        {"keys", s.keys},
                        {"ms", ms},
                        {"tflop_per_s", flops / (ms * 1e-3) / 1e12}};
}

StatusOr<nlohmann::json> BenchGather(Backend& b, const Sizes& s, BackendTensor& k) {
  // Every other key of KV head 0, through the [keys * kv_heads, head_dim] view.
  const int64_t m = s.keys / 2;
  HostTensor rows(DType::kI64, {m});
  for (int64_t i = 0; i < m; ++i) rows.data<int64_t>()[i] = 2 * i * s.kv_heads;
  MP_ASSIGN_OR_RETURN(BackendTensor index, b.Allocate(DType::kI64, {m}));
  MP_RETURN_IF_ERROR(b.CopyFromHost(AsConst(rows.view()), index.view()));
  MP_ASSIGN_OR_RETURN(BackendTensor dst, b.Allocate(DType::kBF16, {m, s.head_dim}));
  MP_ASSIGN_OR_RETURN(BackendTensor host, b.AllocateHost(DType::kBF16, k.view().shape));
  MP_RETURN_IF_ERROR(b.CopyToHost(k.cview(), host.view()));
  MP_ASSIGN_OR_RETURN(ConstTensorView flat_device,
                      Reshape(k.cview(), Shape{s.keys * s.kv_heads, s.head_dim}));
  MP_ASSIGN_OR_RETURN(ConstTensorView flat_host,
                      Reshape(host.cview(), Shape{s.keys * s.kv_heads, s.head_dim}));
  const double bytes = static_cast<double>(dst.NumBytes());
  nlohmann::json out{{"rows", m}, {"row_bytes", s.head_dim * 2}};
  for (const auto& [name, src] : {std::pair{"device", flat_device}, std::pair{"host", flat_host}}) {
    MP_ASSIGN_OR_RETURN(const double ms,
                        TimeMs(
                            [&]() -> Status {
                              MP_RETURN_IF_ERROR(b.GatherRows({src, index.cview(), dst.view()}));
                              return b.Synchronize();
                            },
                            s));
    out[std::string("from_") + name] = {{"ms", ms}, {"gb_per_s", bytes / (ms * 1e-3) / 1e9}};
  }
  return out;
}

// An OmniKV filter layer's selection over `keys` context rows, as the engine runs it on one rank:
// TokenScores of one query (every head) over the keys, a top-k per KV head in column order, and
// the gather index of the chosen rows; each op alone and the three in a row.
StatusOr<nlohmann::json> BenchTokenSelection(Backend& b, const Sizes& s, BackendTensor& k) {
  const int64_t k_top = std::min(s.k, s.keys);
  MP_ASSIGN_OR_RETURN(BackendTensor q, Random(b, DType::kF32, {s.q_heads, s.head_dim}, 7));
  MP_ASSIGN_OR_RETURN(BackendTensor lse, Random(b, DType::kF32, {s.q_heads}, 8));
  MP_ASSIGN_OR_RETURN(BackendTensor score, b.Allocate(DType::kF32, {s.kv_heads, s.keys}));
  MP_ASSIGN_OR_RETURN(BackendTensor chosen, b.Allocate(DType::kI32, {s.kv_heads, k_top}));
  MP_ASSIGN_OR_RETURN(BackendTensor value, b.Allocate(DType::kF32, {s.kv_heads, k_top}));
  MP_ASSIGN_OR_RETURN(BackendTensor index, b.Allocate(DType::kI64, {1, k_top * s.kv_heads}));
  MP_ASSIGN_OR_RETURN(BackendTensor counts, b.Allocate(DType::kI32, {s.kv_heads}));
  auto scores = [&] {
    return b.TokenScores({q.cview(), k.cview(), lse.cview(), 0.0f, score.view()});
  };
  auto top = [&] {
    return b.TopK({score.cview(), k_top, chosen.view(), value.view(), TopKOrder::kColumn});
  };
  auto gather_index = [&] {
    return b.SelectionIndex(
        {chosen.cview(), s.keys, s.keys * s.kv_heads, index.view(), counts.view()});
  };
  auto timed = [&](const std::function<Status()>& op) {
    return TimeMs(
        [&]() -> Status {
          MP_RETURN_IF_ERROR(op());
          return b.Synchronize();
        },
        s);
  };
  MP_RETURN_IF_ERROR(scores());  // the scores the others read
  nlohmann::json out{{"keys", s.keys}, {"k", k_top}};
  MP_ASSIGN_OR_RETURN(const double scores_ms, timed(scores));
  out["token_scores_ms"] = scores_ms;
  out["token_scores_gb_per_s"] = static_cast<double>(k.NumBytes()) / (scores_ms * 1e-3) / 1e9;
  MP_ASSIGN_OR_RETURN(out["top_k_column_order_ms"], timed(top));
  MP_ASSIGN_OR_RETURN(out["selection_index_ms"], timed(gather_index));
  MP_ASSIGN_OR_RETURN(out["all_three_ms"], timed([&]() -> Status {
                        MP_RETURN_IF_ERROR(scores());
                        MP_RETURN_IF_ERROR(top());
                        return gather_index();
                      }));
  return out;
}

// One OmniKV load group from the host tier: `load_layers` layers, each `k` chosen rows per KV head
// of K and of V (the layers share one host tier of `keys` rows here: what is timed is reading
// scattered rows from gigabytes of page-locked memory, not which gigabytes). Two ways:
//  - gather: the engine's, GatherRows reading page-locked host memory from the GPU, on the copy
//    queue, with the index on the device (no host round trip);
//  - packed: the index copied to the host, the rows gathered by host threads into a packed
//    page-locked buffer, then one host -> device copy of it.
StatusOr<nlohmann::json> BenchHostLoads(Backend& b, const Sizes& s) {
  const int64_t k_top = std::min(s.k, s.keys), m = k_top * s.kv_heads, layers = s.load_layers;
  const Shape tier{s.keys * s.kv_heads, s.head_dim};
  MP_ASSIGN_OR_RETURN(BackendTensor host_k, b.AllocateHost(DType::kBF16, tier));
  MP_ASSIGN_OR_RETURN(BackendTensor host_v, b.AllocateHost(DType::kBF16, tier));
  std::fill_n(static_cast<char*>(host_k.view().data), host_k.NumBytes(), 1);
  std::fill_n(static_cast<char*>(host_v.view().data), host_v.NumBytes(), 2);
  // k distinct random positions per KV head, in position order, as flat rows of the tier.
  HostTensor rows(DType::kI64, {m});
  std::mt19937_64 rng(11);
  for (int64_t g = 0; g < s.kv_heads; ++g) {
    std::vector<int64_t> pos(static_cast<size_t>(s.keys));
    for (int64_t i = 0; i < s.keys; ++i) pos[static_cast<size_t>(i)] = i;
    std::shuffle(pos.begin(), pos.end(), rng);
    std::sort(pos.begin(), pos.begin() + k_top);
    for (int64_t i = 0; i < k_top; ++i)
      rows.data<int64_t>()[g * k_top + i] = pos[static_cast<size_t>(i)] * s.kv_heads + g;
  }
  MP_ASSIGN_OR_RETURN(BackendTensor index, b.Allocate(DType::kI64, {m}));
  MP_RETURN_IF_ERROR(b.CopyFromHost(AsConst(rows.view()), index.view()));
  MP_ASSIGN_OR_RETURN(BackendTensor dst, b.Allocate(DType::kBF16, {2 * layers * m, s.head_dim}));
  const int64_t row_bytes = s.head_dim * 2;
  const double bytes = static_cast<double>(2 * layers * m * row_bytes);

  auto gather = [&]() -> Status {
    CopyEvent last{};
    for (int64_t l = 0; l < 2 * layers; ++l) {
      const ConstTensorView src = (l % 2 == 0 ? host_k : host_v).cview();
      MP_ASSIGN_OR_RETURN(last, b.StartGatherRows({src, index.cview(),
                                                   SliceRows(dst.view(), l * m, m)},
                                                  CopyOrder::kAfterCompute));
    }
    return b.WaitCopy(last);
  };
  MP_ASSIGN_OR_RETURN(const double gather_ms, TimeMs(gather, s));

  MP_ASSIGN_OR_RETURN(BackendTensor packed, b.AllocateHost(DType::kBF16, {2 * layers * m,
                                                                          s.head_dim}));
  HostTensor host_index(DType::kI64, {m});
  const int threads = static_cast<int>(s.load_threads);
  double index_ms = 0, host_ms = 0, copy_ms = 0;
  auto now = [] { return std::chrono::steady_clock::now(); };
  auto packed_load = [&]() -> Status {
    const auto t0 = now();
    MP_RETURN_IF_ERROR(b.CopyToHost(index.cview(), host_index.view()));  // waits for it
    const auto t1 = now();
    const int64_t* idx = host_index.data<int64_t>();
    const char* k_src = static_cast<const char*>(host_k.cview().data);
    const char* v_src = static_cast<const char*>(host_v.cview().data);
    char* out = static_cast<char*>(packed.view().data);
    const int64_t items = 2 * layers * m;
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        for (int64_t i = items * t / threads; i < items * (t + 1) / threads; ++i) {
          const int64_t l = i / m, r = idx[i % m];
          std::memcpy(out + i * row_bytes, (l % 2 == 0 ? k_src : v_src) + r * row_bytes,
                      static_cast<size_t>(row_bytes));
        }
      });
    for (std::thread& th : pool) th.join();
    const auto t2 = now();
    MP_ASSIGN_OR_RETURN(CopyEvent e,
                        b.StartCopy(packed.cview(), dst.view(), CopyOrder::kAfterCompute));
    MP_RETURN_IF_ERROR(b.WaitCopy(e));
    const auto t3 = now();
    using Ms = std::chrono::duration<double, std::milli>;
    index_ms += Ms(t1 - t0).count();
    host_ms += Ms(t2 - t1).count();
    copy_ms += Ms(t3 - t2).count();
    return OkStatus();
  };
  MP_ASSIGN_OR_RETURN(const double packed_ms, TimeMs(packed_load, s));
  const double runs = static_cast<double>(s.warmup + s.iters);
  return nlohmann::json{
      {"layers", layers},
      {"rows_per_layer", m},
      {"bytes", bytes},
      {"tier_rows", s.keys},
      {"gather_from_host_memory",
       {{"ms", gather_ms}, {"gb_per_s", bytes / (gather_ms * 1e-3) / 1e9}}},
      {"packed_copy",
       {{"ms", packed_ms},
        {"gb_per_s", bytes / (packed_ms * 1e-3) / 1e9},
        {"threads", threads},
        {"index_to_host_ms", index_ms / runs},
        {"host_gather_ms", host_ms / runs},
        {"copy_ms", copy_ms / runs}}}};
}

// Copies alone, then a host -> device copy started beside KeyScores: with overlap the pair takes
// about the longer of the two, without it their sum.
StatusOr<nlohmann::json> BenchCopies(Backend& b, const Sizes& s, BackendTensor& k) {
  const int64_t n = s.copy_mib * (int64_t{1} << 20) / 4;
  MP_ASSIGN_OR_RETURN(BackendTensor host, b.AllocateHost(DType::kI32, {n}));
  std::fill_n(host.view().as<int32_t>(), n, 7);
  MP_ASSIGN_OR_RETURN(BackendTensor device, b.Allocate(DType::kI32, {n}));
  auto copy = [&](bool to_device) -> Status {
    MP_ASSIGN_OR_RETURN(CopyEvent e,
                        to_device ? b.StartCopy(host.cview(), device.view(), CopyOrder::kNow)
                                  : b.StartCopy(device.cview(), host.view(), CopyOrder::kNow));
    return b.WaitCopy(e);
  };
  MP_ASSIGN_OR_RETURN(const double h2d, TimeMs([&] { return copy(true); }, s));
  MP_ASSIGN_OR_RETURN(const double d2h, TimeMs([&] { return copy(false); }, s));

  MP_ASSIGN_OR_RETURN(BackendTensor q,
                      Random(b, DType::kF32, {s.queries, s.q_heads, s.head_dim}, 4));
  MP_ASSIGN_OR_RETURN(BackendTensor lse, Random(b, DType::kF32, {s.queries, s.q_heads}, 5));
  MP_ASSIGN_OR_RETURN(BackendTensor q_pos, Positions(b, s.keys - s.queries, s.queries));
  MP_ASSIGN_OR_RETURN(BackendTensor k_pos, Positions(b, 0, s.keys));
  MP_ASSIGN_OR_RETURN(BackendTensor score, b.Allocate(DType::kF32, {s.kv_heads, s.keys}));
  auto compute = [&]() -> Status {
    return b.KeyScores(
        {q.cview(), q_pos.cview(), k.cview(), k_pos.cview(), lse.cview(), 0.0f, score.view(), {}});
  };
  MP_ASSIGN_OR_RETURN(const double compute_ms, TimeMs(
                                                   [&]() -> Status {
                                                     MP_RETURN_IF_ERROR(compute());
                                                     return b.Synchronize();
                                                   },
                                                   s));
  MP_ASSIGN_OR_RETURN(const double both_ms,
                      TimeMs(
                          [&]() -> Status {
                            MP_ASSIGN_OR_RETURN(
                                CopyEvent e,
                                b.StartCopy(host.cview(), device.view(), CopyOrder::kNow));
                            MP_RETURN_IF_ERROR(compute());
                            MP_RETURN_IF_ERROR(b.Synchronize());
                            return b.WaitCopy(e);
                          },
                          s));
  const double bytes = static_cast<double>(n) * 4;
  return nlohmann::json{{"bytes", bytes},
                        {"h2d", {{"ms", h2d}, {"gb_per_s", bytes / (h2d * 1e-3) / 1e9}}},
                        {"d2h", {{"ms", d2h}, {"gb_per_s", bytes / (d2h * 1e-3) / 1e9}}},
                        {"key_scores_ms", compute_ms},
                        {"h2d_beside_key_scores_ms", both_ms},
                        {"serial_sum_ms", h2d + compute_ms}};
}

Status Run(int argc, char** argv) {
  MP_ASSIGN_OR_RETURN(const Flags flags, Flags::Parse(argc, argv, {"help"}));
  if (flags.GetBool("help")) {
    std::cout << kUsage;
    return OkStatus();
  }
  MP_RETURN_IF_ERROR(flags.CheckKnown({"help", "rows", "cols", "k", "keys", "queries", "q-heads",
                                       "kv-heads", "head-dim", "copy-mib", "warmup", "iters",
                                       "load-layers", "load-threads"}));
  Sizes s{};
  MP_ASSIGN_OR_RETURN(s.rows, flags.GetInt("rows", 8));
  MP_ASSIGN_OR_RETURN(s.cols, flags.GetInt("cols", 1 << 20));
  MP_ASSIGN_OR_RETURN(s.k, flags.GetInt("k", 16384));
  MP_ASSIGN_OR_RETURN(s.keys, flags.GetInt("keys", 131072));
  MP_ASSIGN_OR_RETURN(s.queries, flags.GetInt("queries", 64));
  MP_ASSIGN_OR_RETURN(s.q_heads, flags.GetInt("q-heads", 32));
  MP_ASSIGN_OR_RETURN(s.kv_heads, flags.GetInt("kv-heads", 8));
  MP_ASSIGN_OR_RETURN(s.head_dim, flags.GetInt("head-dim", 128));
  MP_ASSIGN_OR_RETURN(s.copy_mib, flags.GetInt("copy-mib", 256));
  MP_ASSIGN_OR_RETURN(s.warmup, flags.GetInt("warmup", 2));
  MP_ASSIGN_OR_RETURN(s.iters, flags.GetInt("iters", 5));
  MP_ASSIGN_OR_RETURN(s.load_layers, flags.GetInt("load-layers", 6));
  const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  MP_ASSIGN_OR_RETURN(s.load_threads, flags.GetInt("load-threads", std::min<int64_t>(cores, 16)));
  MP_REQUIRE(s.load_layers > 0 && s.load_threads > 0,
             "--load-layers and --load-threads must be > 0");
  MP_REQUIRE(s.rows > 0 && s.cols > 0 && s.k > 0 && s.keys > s.queries && s.queries > 0 &&
                 s.kv_heads > 0 && s.q_heads % s.kv_heads == 0 && s.head_dim > 0 &&
                 s.copy_mib > 0 && s.iters > 0 && s.warmup >= 0,
             "bad sizes (see --help)");

  MP_ASSIGN_OR_RETURN(std::unique_ptr<Backend> b, CreateBackend(BackendKind::kCuda, 0));
  MP_ASSIGN_OR_RETURN(BackendTensor k,
                      Random(*b, DType::kBF16, {s.keys, s.kv_heads, s.head_dim}, 6));
  nlohmann::json out{{"bench", "selection"}, {"warmup", s.warmup}, {"iters", s.iters}};
  MP_ASSIGN_OR_RETURN(out["top_k"], BenchTopK(*b, s));
  MP_ASSIGN_OR_RETURN(out["key_scores"], BenchKeyScores(*b, s, k));
  MP_ASSIGN_OR_RETURN(out["token_selection"], BenchTokenSelection(*b, s, k));
  MP_ASSIGN_OR_RETURN(out["gather_rows"], BenchGather(*b, s, k));
  MP_ASSIGN_OR_RETURN(out["copies"], BenchCopies(*b, s, k));
  MP_ASSIGN_OR_RETURN(out["host_loads"], BenchHostLoads(*b, s));
  std::cout << out.dump(2) << "\n";
  return OkStatus();
}

}  // namespace
}  // namespace millipede

int main(int argc, char** argv) {
  const millipede::Status status = millipede::Run(argc, argv);
  if (!status.ok()) {
    std::cerr << "millipede-bench-selection: " << status.ToString() << "\n";
    return 1;
  }
  return 0;
}
