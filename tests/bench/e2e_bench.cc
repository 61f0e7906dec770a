// millipede-bench-e2e: end-to-end prefill and decode of a random-weight model on 1..N ranks
// (run under mpirun for N > 1; one GPU per rank with --backend cuda). For each prompt length it
// runs one job (random prompt ids, greedy, EOS ignored): time to first token, prefill time (until
// every rank is done), decode tokens/s (median time between tokens), the first
// generated ids (N ranks must give the ids of one), and where each rank's time went. With
// --profile the engine synchronises at phase boundaries and reports per-layer compute vs
// communication time (a little slower). --gemm-reference times the model's GEMMs alone on this
// backend (cuBLAS speed) for the same token count. Rank 0 prints one JSON object per line.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/flags.h"
#include "models/model_presets.h"
#include "worker/dist/mpi_main.h"
#include "worker/engine_flags.h"
#include "worker/generate.h"

namespace millipede {
namespace {

constexpr char kUsage[] = R"(usage: [mpirun -np N] millipede-bench-e2e [options]

  --preset P           model shape: llama3-8b (default) | tiny | any millipede-mkmodel preset
  --layers L           run only the first L layers of the shape (default: all); per-layer
                       figures are unaffected, whole-model times scale with L
  --seq S[,S...]       prompt lengths (default 32768)
  --decode-tokens N    tokens generated after the prompt and timed (default 32)
  --warmup-seq S       untimed warm-up job of S tokens first (default 2048; 0 skips)
  --backend B          cuda (default) | cpu
  --kv-dtype D         bf16 (default) | fp16 | fp32 | fp8
  --dtype D            weight dtype: bf16 (default) | fp16 | fp32
  --prefill-chunk N    tokens per projection/MLP chunk (default 4096)
  --attention-chunk N  query rows per attention call (default 16384)
  --seed S             weight and prompt seed (default 1)
  --locality L         random weights with local attention (random_weights.h): q.k/sqrt(d)
                       gains about L at distance 0 (default 0: plain random weights, which
                       attend almost uniformly)
  --policy FILE        attention policy file (default dense/full)
  --selected-kv T      OmniKV's selected layers' prompt KV: auto (default) | device | host
  --profile            per-phase times (synchronises at phase boundaries); with --decode-only,
                       ms per token of each phase (OmniKV's selection and the waits for its
                       host-tier loads among them) and the share of load time hidden
  --gemm-reference     also time the model's GEMMs alone for each prompt length
  --batch B,...        B sequences decoding together, each over a synthetic (zero) cache of each
                       --seq length: one engine step per token of all (the service's batched
                       decode); reports ms per step and output tokens per second
  --decode-only        no prefill: decode over a synthetic (zero) KV cache of each length,
                       placed over the ranks as a prompt would be (decode speed only)
  --split-kv-heads S   a store per group of KV heads in layers mixing full and streaming heads:
                       on (default) | off
  --decode-graphs M    record decode steps once and replay them: auto (default) | off |
                       unrecorded (the recorded steps' arguments, not recorded)
  --prefill-step N     prefill each prompt in steps of N tokens (as the service chunks a long
                       prompt), each step sharded over the ranks; reports every step's time
                       and no decode
  --prefill-exchange M how ranks share a prefill step's dense heads: auto (default) | pass-kv |
                       pass-q (worker/attention/prefill_exchange.h)
  --decode-mlp M       with several ranks, a decode token's MLP: split (default: each rank its
                       share of the intermediate columns) | whole (every rank all of it)
  --follow-up N        no prefill: a document of each --seq length (a synthetic cache, as
                       --decode-only makes it) kept as a prefix-cache entry, then --questions
                       follow-ups of N new tokens, each taking the previous one's sequence over at
                       the document's length (the service's take-over); reports each one's time
                       from its start to its logits (every rank done): the engine's share of a
                       follow-up's time to first token
  --questions Q        follow-ups per document with --follow-up (default 5)
)";

// The sequence the chunked prefill and the single-sequence decode run on.
constexpr SequenceId kBenchSequence = 1;

StatusOr<std::vector<int64_t>> ParseList(const std::string& text, const char* flag) {
  std::vector<int64_t> out;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    MP_ASSIGN_OR_RETURN(int64_t v, ParseInt64(text.substr(begin, end - begin), flag));
    MP_REQUIRE(v > 0, flag, " values must be positive, got ", v);
    out.push_back(v);
    begin = end + 1;
  }
  return out;
}

std::vector<int32_t> RandomPrompt(int64_t n, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 0x1234567ull;
  for (auto& id : ids) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    id = static_cast<int32_t>(state % static_cast<uint64_t>(vocab));
  }
  return ids;
}

// The seven weight GEMMs of one layer at m = chunk rows, timed on `backend`; returns seconds
// for `tokens` tokens through `layers` layers (plus the LM head once).
StatusOr<double> GemmReferenceSeconds(Backend& backend, const ModelConfig& c, DType dtype,
                                      int64_t chunk, int64_t tokens, int64_t layers) {
  const int64_t h = c.hidden_size, q = c.num_attention_heads * c.head_dim,
                kv = c.num_key_value_heads * c.head_dim, f = c.intermediate_size;
  struct Shape2 {
    int64_t n, k;
  };
  const std::vector<Shape2> shapes = {{q, h}, {kv, h}, {kv, h}, {h, q}, {f, h}, {f, h}, {h, f}};
  std::vector<BackendTensor> weights, inputs, outputs;
  for (const Shape2& s : shapes) {
    MP_ASSIGN_OR_RETURN(BackendTensor w, backend.Allocate(dtype, Shape{s.n, s.k}));
    MP_ASSIGN_OR_RETURN(BackendTensor a, backend.Allocate(DType::kF32, Shape{chunk, s.k}));
    MP_ASSIGN_OR_RETURN(BackendTensor o, backend.Allocate(DType::kF32, Shape{chunk, s.n}));
    // Any finite contents do: cuBLAS's speed does not depend on the values.
    std::vector<float> host_a(static_cast<size_t>(chunk * s.k), 0.01f);
    MP_RETURN_IF_ERROR(backend.CopyFromHost(
        ConstTensorView{host_a.data(), DType::kF32, Shape{chunk, s.k}}, a.view()));
    std::vector<float> host_w(static_cast<size_t>(s.n * s.k), 0.02f);
    MP_ASSIGN_OR_RETURN(BackendTensor w32, backend.Allocate(DType::kF32, Shape{s.n, s.k}));
    MP_RETURN_IF_ERROR(backend.CopyFromHost(
        ConstTensorView{host_w.data(), DType::kF32, Shape{s.n, s.k}}, w32.view()));
    MP_RETURN_IF_ERROR(backend.Convert(w32.cview(), w.view()));
    weights.push_back(std::move(w));
    inputs.push_back(std::move(a));
    outputs.push_back(std::move(o));
  }
  auto run_layer = [&]() -> Status {
    for (size_t i = 0; i < shapes.size(); ++i)
      MP_RETURN_IF_ERROR(backend.Gemm(
          {inputs[i].cview(), weights[i].cview(), ConstTensorView{}, outputs[i].view()}));
    return OkStatus();
  };
  MP_RETURN_IF_ERROR(run_layer());  // warm-up (algorithm selection)
  MP_RETURN_IF_ERROR(backend.Synchronize());
  const int iters = 10;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) MP_RETURN_IF_ERROR(run_layer());
  MP_RETURN_IF_ERROR(backend.Synchronize());
  const double per_layer_chunk =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
  return per_layer_chunk * static_cast<double>(tokens) / static_cast<double>(chunk) *
         static_cast<double>(layers);
}

EngineStats Minus(const EngineStats& a, const EngineStats& b) {
  EngineStats d;
  d.embed_s = a.embed_s - b.embed_s;
  d.qkv_s = a.qkv_s - b.qkv_s;
  d.attention_s = a.attention_s - b.attention_s;
  d.sparse_select_s = a.sparse_select_s - b.sparse_select_s;
  d.sparse_index_s = a.sparse_index_s - b.sparse_index_s;
  d.omnikv_select_s = a.omnikv_select_s - b.omnikv_select_s;
  d.load_wait_s = a.load_wait_s - b.load_wait_s;
  d.host_load_bytes = a.host_load_bytes - b.host_load_bytes;
  d.comm_wait_s = a.comm_wait_s - b.comm_wait_s;
  d.mlp_s = a.mlp_s - b.mlp_s;
  d.logits_s = a.logits_s - b.logits_s;
  d.comm_bytes = a.comm_bytes - b.comm_bytes;
  d.prefill_layers = a.prefill_layers - b.prefill_layers;
  d.decode_layers = a.decode_layers - b.decode_layers;
  d.pass_q_passes = a.pass_q_passes - b.pass_q_passes;
  return d;
}

// Every rank's `s`, in rank order, as JSON (a collective: every rank calls it).
StatusOr<nlohmann::json> GatherStats(Engine& engine, const EngineStats& s) {
  constexpr size_t kFields = 15;
  const double mine[kFields] = {s.embed_s,
                                s.qkv_s,
                                s.attention_s,
                                s.comm_wait_s,
                                s.mlp_s,
                                s.logits_s,
                                static_cast<double>(s.comm_bytes),
                                static_cast<double>(s.prefill_layers),
                                static_cast<double>(s.decode_layers),
                                s.sparse_select_s,
                                s.sparse_index_s,
                                s.omnikv_select_s,
                                s.load_wait_s,
                                static_cast<double>(s.host_load_bytes),
                                static_cast<double>(s.pass_q_passes)};
  const int n = engine.comm().size();
  std::vector<double> all(kFields * static_cast<size_t>(n));
  if (n > 1) {
    MP_RETURN_IF_ERROR(engine.comm().HostAllGather(mine, all.data(), sizeof(mine)));
  } else {
    std::copy(mine, mine + kFields, all.begin());
  }
  nlohmann::json ranks = nlohmann::json::array();
  for (int r = 0; r < n; ++r) {
    const double* m = &all[kFields * static_cast<size_t>(r)];
    ranks.push_back({{"rank", r},
                     {"embed_s", m[0]},
                     {"qkv_s", m[1]},
                     {"attention_s", m[2]},
                     {"comm_wait_s", m[3]},
                     {"mlp_s", m[4]},
                     {"logits_s", m[5]},
                     {"comm_bytes", m[6]},
                     {"prefill_layers", m[7]},
                     {"decode_layers", m[8]},
                     {"sparse_select_s", m[9]},
                     {"sparse_index_s", m[10]},
                     {"omnikv_select_s", m[11]},
                     {"load_wait_s", m[12]},
                     {"host_load_bytes", m[13]},
                     {"pass_q_passes", m[14]}});
  }
  return ranks;
}

// Prefills `ids` in steps of `step` tokens, each sharded over the ranks as ShardedPrefill does
// (the service's chunked prefill); returns each step's milliseconds (every rank done) and the
// ranks' statistics.
StatusOr<nlohmann::json> ChunkedPrefill(Engine& engine, const std::vector<int32_t>& ids,
                                        int64_t step) {
  Communicator& comm = engine.comm();
  const int64_t n = static_cast<int64_t>(ids.size());
  std::vector<SequenceStep> shares;
  int64_t capacity = 0, widest = 0;
  for (int64_t begin = 0; begin < n; begin += step) {
    const std::span<const int32_t> chunk(ids.data() + begin, std::min(step, n - begin));
    MP_ASSIGN_OR_RETURN(SequenceStep share,
                        ShardedPrefill(kBenchSequence, begin, chunk, comm.rank(), comm.size()));
    capacity += static_cast<int64_t>(share.ids.size());
    widest = std::max(widest, static_cast<int64_t>(share.ids.size()));
    shares.push_back(std::move(share));
  }
  const SequenceOptions options{std::max<int64_t>(capacity, 1), std::max<int64_t>(widest, 1),
                                engine.policy()};
  MP_RETURN_IF_ERROR(engine.StartSequence(kBenchSequence, options));
  engine.ResetStats();
  std::vector<double> step_ms;
  std::optional<ConstTensorView> logits;
  for (const SequenceStep& share : shares) {
    const auto t0 = std::chrono::steady_clock::now();
    MP_ASSIGN_OR_RETURN(StepOutput out, engine.RunStep(StepPlan{{share}}));
    logits = out.logits[0];
    MP_RETURN_IF_ERROR(engine.backend().Synchronize());
    MP_RETURN_IF_ERROR(engine.comm().Barrier());
    step_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  // The last position's five largest logits, from the rank that holds them: runs that should
  // agree (exchanges, rank counts) are compared by these.
  const int64_t vocab = engine.config().vocab_size;
  struct Top {
    int32_t id[5];
    float value[5];
    int32_t held;
  } top{};
  if (logits.has_value()) {
    std::vector<float> host(static_cast<size_t>(vocab));
    MP_RETURN_IF_ERROR(
        engine.backend().CopyToHost(*logits, {host.data(), DType::kF32, Shape{vocab}}));
    std::vector<int32_t> order(host.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
    std::partial_sort(order.begin(), order.begin() + 5, order.end(),
                      [&](int32_t a, int32_t b) {
                        return host[static_cast<size_t>(a)] > host[static_cast<size_t>(b)];
                      });
    for (int i = 0; i < 5; ++i) {
      top.id[i] = order[i];
      top.value[i] = host[static_cast<size_t>(order[i])];
    }
    top.held = 1;
  }
  std::vector<Top> all(static_cast<size_t>(comm.size()));
  MP_RETURN_IF_ERROR(comm.HostAllGather(&top, all.data(), sizeof(Top)));
  for (const Top& t : all)
    if (t.held) top = t;
  MP_ASSIGN_OR_RETURN(nlohmann::json stats, GatherStats(engine, engine.stats()));
  engine.EndSequence(kBenchSequence);
  double total_ms = 0;
  for (double ms : step_ms) total_ms += ms;
  return nlohmann::json{{"bench", "e2e-chunked-prefill"},
                        {"seq", n},
                        {"prefill_step", step},
                        {"ranks", comm.size()},
                        {"prefill_s", total_ms / 1000.0},
                        {"last_step_ms", step_ms.empty() ? 0.0 : step_ms.back()},
                        {"top_ids", std::vector<int32_t>(top.id, top.id + 5)},
                        {"top_logits", std::vector<float>(top.value, top.value + 5)},
                        {"step_ms", step_ms},
                        {"prefill_stats", stats}};
}

// How fast a gather of `row_bytes` rows from pinned host memory runs on the copy queue (GB/s):
// the rate OmniKV's packed loads read the host tier at, measured on 256 MiB of random rows.
StatusOr<double> HostGatherGbPerS(Backend& backend, int64_t row_bytes) {
  const int64_t rows = (int64_t{256} << 20) / row_bytes, picked = rows / 4;
  MP_ASSIGN_OR_RETURN(BackendTensor src, backend.AllocateHost(DType::kU8, Shape{rows, row_bytes}));
  MP_ASSIGN_OR_RETURN(BackendTensor dst, backend.Allocate(DType::kU8, Shape{picked, row_bytes}));
  MP_ASSIGN_OR_RETURN(BackendTensor index, backend.Allocate(DType::kI64, Shape{picked}));
  std::vector<int64_t> host_index(static_cast<size_t>(picked));
  uint64_t state = 88172645463325252ull;
  for (int64_t& i : host_index) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    i = static_cast<int64_t>(state % static_cast<uint64_t>(rows));
  }
  MP_RETURN_IF_ERROR(
      backend.CopyFromHost({host_index.data(), DType::kI64, Shape{picked}}, index.view()));
  MP_RETURN_IF_ERROR(backend.Synchronize());
  double best = 0;
  for (int rep = 0; rep < 4; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    MP_ASSIGN_OR_RETURN(
        CopyEvent e,
        backend.StartGatherRows({src.cview(), index.cview(), dst.view()}, CopyOrder::kNow));
    MP_RETURN_IF_ERROR(backend.WaitCopy(e));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0) best = std::max(best, static_cast<double>(picked * row_bytes) / s / 1e9);
  }
  return best;
}

// Per-token milliseconds of each profiled phase (--profile), and what part of the host-tier
// loads' time compute did not hide (the waits, against the loads' bytes at the measured rate).
nlohmann::json DecodeProfile(const EngineStats& s, int64_t tokens, double gather_gb_per_s) {
  const double per = 1000.0 / static_cast<double>(tokens);
  nlohmann::json out = {{"embed", s.embed_s * per},
                        {"qkv", s.qkv_s * per},
                        {"attention", s.attention_s * per},
                        {"select", s.omnikv_select_s * per},
                        {"load_wait", s.load_wait_s * per},
                        {"comm_wait", s.comm_wait_s * per},
                        {"mlp", s.mlp_s * per},
                        {"logits", s.logits_s * per}};
  if (gather_gb_per_s > 0 && s.host_load_bytes > 0) {
    const double load_s = static_cast<double>(s.host_load_bytes) / (gather_gb_per_s * 1e9);
    out["load_est"] = load_s * per;
    out["load_hidden_share"] = std::clamp(1.0 - s.load_wait_s / load_s, 0.0, 1.0);
  }
  return out;
}

// `batch` sequences decoding together over synthetic caches of `length` positions each: one
// engine step per token of every sequence (as the service's batched decode runs them), each
// sequence's token drawn on rank 0 and broadcast. The first step is untimed.
StatusOr<nlohmann::json> BatchDecode(Engine& engine, int64_t batch, int64_t length,
                                     int64_t tokens) {
  for (int64_t b = 1; b <= batch; ++b)
    MP_RETURN_IF_ERROR(engine.StartSyntheticSequence(b, length, tokens + 1));
  Communicator& comm = engine.comm();
  std::vector<int32_t> next(static_cast<size_t>(batch), 1);
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t step = 0; step <= tokens; ++step) {
    if (step == 1) {
      MP_RETURN_IF_ERROR(engine.backend().Synchronize());
      t0 = std::chrono::steady_clock::now();
      engine.ResetStats();
    }
    StepPlan plan;
    for (int64_t b = 0; b < batch; ++b)
      plan.steps.push_back(DecodeStep(b + 1, next[static_cast<size_t>(b)]));
    MP_ASSIGN_OR_RETURN(StepOutput out, engine.RunStep(plan));
    if (comm.rank() == 0) {
      for (int64_t b = 0; b < batch; ++b) {
        MP_ASSIGN_OR_RETURN(int32_t id, engine.backend().Sample(*out.logits[static_cast<size_t>(b)],
                                                                SamplingParams{}, 0));
        next[static_cast<size_t>(b)] = id;
      }
    }
    if (comm.size() > 1)
      MP_RETURN_IF_ERROR(comm.HostBroadcast(next.data(), next.size() * sizeof(int32_t), 0));
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const EngineStats stats = engine.stats();
  for (int64_t b = 1; b <= batch; ++b) engine.EndSequence(b);
  nlohmann::json out{{"bench", "e2e-batch-decode"},
                     {"backend", BackendKindName(engine.backend().kind())},
                     {"ranks", comm.size()},
                     {"context", length},
                     {"batch", batch},
                     {"decode_steps", tokens},
                     {"ms_per_step", 1000.0 * s / static_cast<double>(tokens)},
                     {"output_tokens_per_s", static_cast<double>(batch * tokens) / s},
                     {"decode_graphs", DecodeGraphsName(engine.options().decode_graphs)},
                     {"recorded_steps", stats.recorded_steps},
                     {"replayed_steps", stats.replayed_steps}};
  if (engine.options().profile) out["profile_ms_per_step"] = DecodeProfile(stats, tokens, 0);
  return out;
}

// Decode steps over a synthetic cache of `length` positions: the first step is untimed (warm-up),
// the next `tokens` are timed. Greedy; rank 0 samples and broadcasts, as Generate does.
StatusOr<nlohmann::json> DecodeOnly(Engine& engine, int64_t length, int64_t tokens) {
  const auto setup0 = std::chrono::steady_clock::now();
  MP_RETURN_IF_ERROR(engine.StartSyntheticSequence(kBenchSequence, length, tokens + 1));
  const double setup_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - setup0).count();
  Communicator& comm = engine.comm();
  int32_t token = 1;
  std::vector<int32_t> ids;
  std::vector<double> step_ms;
  auto t0 = std::chrono::steady_clock::now(), last = t0;
  for (int64_t step = 0; step <= tokens; ++step) {
    if (step == 1) {
      t0 = last = std::chrono::steady_clock::now();
      engine.ResetStats();
    }
    MP_ASSIGN_OR_RETURN(StepOutput out,
                        engine.RunStep(StepPlan{{DecodeStep(kBenchSequence, token)}}));
    if (comm.rank() == 0) {
      MP_ASSIGN_OR_RETURN(token, engine.backend().Sample(*out.logits[0], SamplingParams{}, 0));
    }
    if (comm.size() > 1) MP_RETURN_IF_ERROR(comm.HostBroadcast(&token, sizeof(token), 0));
    ids.push_back(token);
    const auto now = std::chrono::steady_clock::now();
    if (step >= 1) step_ms.push_back(std::chrono::duration<double, std::milli>(now - last).count());
    last = now;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::sort(step_ms.begin(), step_ms.end());
  // Rank 0's KV by tier, and what OmniKV's packed loads read from its host tier per token.
  const int64_t host_kv = engine.HostKvBytes(), device_kv = engine.KvBytes() - host_kv;
  const EngineStats stats = engine.stats();
  const double loaded = static_cast<double>(stats.host_load_bytes) / tokens;
  engine.EndSequence(kBenchSequence);
  nlohmann::json out{
      {"bench", "e2e-decode"},
      {"backend", BackendKindName(engine.backend().kind())},
      {"ranks", comm.size()},
      {"context", length},
      {"decode_tokens", tokens},
      {"decode_tokens_per_s", static_cast<double>(tokens) / s},
      {"decode_ms_per_token", 1000.0 * s / static_cast<double>(tokens)},
      {"decode_ms_per_token_median", step_ms[step_ms.size() / 2]},
      {"decode_graphs", DecodeGraphsName(engine.options().decode_graphs)},
      {"split_kv_heads", engine.options().split_kv_heads},
      {"decode_mlp", engine.options().split_decode_mlp ? "split" : "whole"},
      {"split_mlp_passes", stats.split_mlp_passes},
      {"recorded_steps", stats.recorded_steps},
      {"replayed_steps", stats.replayed_steps},
      {"setup_s", setup_s},
      {"kv_bytes_device", device_kv},
      {"kv_bytes_host", host_kv},
      {"host_load_bytes_per_token", loaded},
      {"first_ids",
       std::vector<int32_t>(ids.begin(), ids.begin() + std::min<size_t>(8, ids.size()))}};
  if (engine.options().profile) {
    double gb_per_s = 0;
    if (stats.host_load_bytes > 0) {
      const ModelConfig& c = engine.config();
      MP_ASSIGN_OR_RETURN(
          gb_per_s, HostGatherGbPerS(
                        engine.backend(),
                        c.head_dim * static_cast<int64_t>(DTypeSize(engine.options().kv_dtype))));
      out["host_gather_gb_per_s"] = gb_per_s;
    }
    out["profile_ms_per_token"] = DecodeProfile(stats, tokens, gb_per_s);
  }
  return out;
}

// A document of `length` positions kept as a prefix-cache entry (a synthetic cache), then
// `questions` follow-ups of `new_tokens` tokens: each starts from the previous one's sequence,
// taken over at the document's length (its question's rows forgotten), prefills its question and
// is kept in turn. Each one's time runs from its start to its logits with every rank done.
StatusOr<nlohmann::json> FollowUps(Engine& engine, int64_t length, int64_t new_tokens,
                                   int64_t questions, uint64_t seed) {
  Communicator& comm = engine.comm();
  constexpr int64_t kDecode = 8;
  const auto setup0 = std::chrono::steady_clock::now();
  MP_RETURN_IF_ERROR(engine.StartSyntheticSequence(kBenchSequence, length, kDecode, new_tokens));
  MP_RETURN_IF_ERROR(engine.KeepSequence(kBenchSequence));
  const double setup_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - setup0).count();
  MP_ASSIGN_OR_RETURN(const ShardPlan plan, ShardPlan::Create(length, comm.size()));
  const int64_t question_rows = PromptRowsBoundPerRank(new_tokens, comm.size());
  const int64_t decode_rows = DecodeRowsPerRank(kDecode + 1, comm.size());
  const SequenceOptions options{plan.RankPromptTokens(comm.rank()) + question_rows + decode_rows,
                                question_rows, engine.policy(), decode_rows};
  std::vector<double> ms;
  SequenceId from = kBenchSequence;
  engine.ResetStats();
  for (int64_t q = 0; q < questions; ++q) {
    const SequenceId id = kBenchSequence + 1 + q;
    const std::vector<int32_t> ids =
        RandomPrompt(new_tokens, engine.config().vocab_size, seed + static_cast<uint64_t>(q));
    MP_RETURN_IF_ERROR(comm.Barrier());
    const auto t0 = std::chrono::steady_clock::now();
    MP_RETURN_IF_ERROR(engine.StartSequence(id, options, CachedPrefix{from, length, true}));
    MP_ASSIGN_OR_RETURN(SequenceStep share,
                        ShardedPrefill(id, length, ids, comm.rank(), comm.size()));
    MP_RETURN_IF_ERROR(engine.RunStep(StepPlan{{share}}).status());
    MP_RETURN_IF_ERROR(engine.backend().Synchronize());
    MP_RETURN_IF_ERROR(comm.Barrier());
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    MP_RETURN_IF_ERROR(engine.KeepSequence(id));
    from = id;
  }
  // Every question's phases together (with --profile, synchronised at their boundaries).
  MP_ASSIGN_OR_RETURN(nlohmann::json stats, GatherStats(engine, engine.stats()));
  const int64_t host_kv = engine.CachedHostKvBytes();
  engine.DropCached(from);
  return nlohmann::json{{"bench", "e2e-follow-up"},
                        {"follow_up_stats", stats},
                        {"backend", BackendKindName(engine.backend().kind())},
                        {"ranks", comm.size()},
                        {"document", length},
                        {"new_tokens", new_tokens},
                        {"setup_s", setup_s},
                        {"follow_up_ms", ms},
                        {"host_kv_bytes", host_kv}};
}

Status Run(int argc, char** argv, const MpiWorld& world) {
  MP_ASSIGN_OR_RETURN(
      Flags flags, Flags::Parse(argc, argv, {"profile", "gemm-reference", "decode-only", "help"}));
  if (flags.GetBool("help")) {
    if (world.rank == 0) std::cout << kUsage;
    return OkStatus();
  }
  MP_RETURN_IF_ERROR(flags.CheckKnown(
      {"preset", "layers", "seq", "decode-tokens", "warmup-seq", "batch", "backend", "kv-dtype",
       "dtype", "prefill-chunk", "attention-chunk", "seed", "locality", "policy", "selected-kv",
       "profile", "gemm-reference", "decode-only", "decode-graphs", "split-kv-heads",
       "prefill-step", "prefill-exchange", "decode-mlp", "follow-up", "questions", "help"}));
  MP_REQUIRE(flags.positional().empty(), "unexpected argument \"", flags.positional()[0], "\"");
  const std::string preset = flags.Get("preset").value_or("llama3-8b");
  MP_ASSIGN_OR_RETURN(ModelConfig config, ModelPreset(preset));
  MP_ASSIGN_OR_RETURN(int64_t layers, flags.GetInt("layers", config.num_hidden_layers));
  MP_REQUIRE(layers >= 1 && layers <= config.num_hidden_layers, "--layers must lie in [1, ",
             config.num_hidden_layers, "]");
  const int64_t full_layers = config.num_hidden_layers;
  config.num_hidden_layers = layers;
  MP_ASSIGN_OR_RETURN(std::vector<int64_t> seqs,
                      ParseList(flags.Get("seq").value_or("32768"), "--seq"));
  MP_ASSIGN_OR_RETURN(int64_t decode_tokens, flags.GetInt("decode-tokens", 32));
  MP_ASSIGN_OR_RETURN(int64_t warmup_seq, flags.GetInt("warmup-seq", 2048));
  MP_REQUIRE(decode_tokens >= 1 && warmup_seq >= 0, "--decode-tokens >= 1, --warmup-seq >= 0");
  MP_ASSIGN_OR_RETURN(int64_t seed, flags.GetInt("seed", 1));

  EngineOptions options;
  options.random_config = config;
  MP_ASSIGN_OR_RETURN(options.backend, ParseBackendKind(flags.Get("backend").value_or("cuda")));
  MP_ASSIGN_OR_RETURN(options.kv_dtype, ParseKvDTypeName(flags.Get("kv-dtype").value_or("bf16")));
  MP_ASSIGN_OR_RETURN(options.random_weights.dtype,
                      ParseFloatDTypeName(flags.Get("dtype").value_or("bf16")));
  options.random_weights.seed = static_cast<uint64_t>(seed);
  MP_ASSIGN_OR_RETURN(options.random_weights.locality, flags.GetDouble("locality", 0.0));
  MP_REQUIRE(options.random_weights.locality >= 0, "--locality must be >= 0");
  options.random_weights.head_dim = config.head_dim;
  MP_ASSIGN_OR_RETURN(options.prefill_chunk, flags.GetInt("prefill-chunk", 4096));
  MP_ASSIGN_OR_RETURN(options.attention_chunk, flags.GetInt("attention-chunk", 16384));
  options.profile = flags.GetBool("profile");
  options.policy_file = flags.Get("policy").value_or("");
  MP_ASSIGN_OR_RETURN(options.selected_kv,
                      ParseSelectedKvTier(flags.Get("selected-kv").value_or("auto")));
  MP_ASSIGN_OR_RETURN(options.decode_graphs,
                      ParseDecodeGraphs(flags.Get("decode-graphs").value_or("auto")));
  MP_ASSIGN_OR_RETURN(options.split_kv_heads,
                      ParseSplitKvHeads(flags.Get("split-kv-heads").value_or("on")));
  MP_ASSIGN_OR_RETURN(options.prefill_exchange,
                      ParsePrefillExchange(flags.Get("prefill-exchange").value_or("auto")));
  MP_ASSIGN_OR_RETURN(options.split_decode_mlp,
                      ParseDecodeMlp(flags.Get("decode-mlp").value_or("split")));
  MP_ASSIGN_OR_RETURN(int64_t prefill_step, flags.GetInt("prefill-step", 0));
  MP_REQUIRE(prefill_step >= 0, "--prefill-step must be >= 0, got ", prefill_step);
  MP_ASSIGN_OR_RETURN(int64_t follow_up, flags.GetInt("follow-up", 0));
  MP_ASSIGN_OR_RETURN(int64_t questions, flags.GetInt("questions", 5));
  MP_REQUIRE(follow_up >= 0 && questions >= 1, "--follow-up must be >= 0 and --questions >= 1");
  options.device = world.local_rank;
  MP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                      CreateDataPlane(MPI_COMM_WORLD, world.local_rank, options.backend));
  const auto load0 = std::chrono::steady_clock::now();
  MP_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(options, std::move(comm)));
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - load0).count();

  // The stats when the first token came out: everything before is prefill.
  EngineStats at_first_token;
  std::vector<double> token_ms;  // time between consecutive generated tokens
  // The first token is out when the rank holding the last prompt position has its logits; the
  // other ranks may still be finishing their own rows' last layers. Prefill is over when every
  // rank is: measured after the first token by waiting for every GPU and every rank.
  double prefill_all_ranks_s = 0;
  Status first_token_status;
  auto job = [&](int64_t seq, uint64_t job_seed) {
    token_ms.clear();
    const auto start = std::chrono::steady_clock::now();
    auto last = start;
    GenerationRequest request;
    request.prompt_ids = RandomPrompt(seq, config.vocab_size, job_seed);
    request.max_new_tokens = decode_tokens + 1;
    request.ignore_eos = true;
    bool first = true;
    return Generate(*engine, request, [&](const SampledToken&) {
      if (first) {
        at_first_token = engine->stats();
        first_token_status = engine->backend().Synchronize();
        int32_t flag = 1;
        std::vector<int32_t> flags(static_cast<size_t>(engine->comm().size()));
        if (first_token_status.ok() && engine->comm().size() > 1)
          first_token_status = engine->comm().HostAllGather(&flag, flags.data(), sizeof(flag));
        prefill_all_ranks_s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }
      const auto now = std::chrono::steady_clock::now();
      if (!first) token_ms.push_back(std::chrono::duration<double, std::milli>(now - last).count());
      last = now;
      first = false;
      return true;
    });
  };
  if (warmup_seq > 0) MP_RETURN_IF_ERROR(job(warmup_seq, 0).status());

  if (flags.Get("batch")) {
    MP_ASSIGN_OR_RETURN(std::vector<int64_t> batches, ParseList(*flags.Get("batch"), "--batch"));
    for (int64_t seq : seqs) {
      for (int64_t batch : batches) {
        MP_REQUIRE(batch >= 1, "--batch values must be >= 1");
        MP_ASSIGN_OR_RETURN(nlohmann::json out, BatchDecode(*engine, batch, seq, decode_tokens));
        out["preset"] = preset;
        out["layers"] = layers;
        if (world.rank == 0) std::cout << out.dump() << std::endl;
      }
    }
    return OkStatus();
  }
  if (prefill_step > 0) {
    for (int64_t seq : seqs) {
      MP_ASSIGN_OR_RETURN(
          nlohmann::json out,
          ChunkedPrefill(*engine,
                         RandomPrompt(seq, config.vocab_size, static_cast<uint64_t>(seed) + seq),
                         prefill_step));
      out["preset"] = preset;
      out["layers"] = layers;
      out["prefill_exchange"] = PrefillExchangeName(options.prefill_exchange);
      if (world.rank == 0) std::cout << out.dump() << std::endl;
    }
    return OkStatus();
  }
  if (follow_up > 0) {
    for (int64_t seq : seqs) {
      MP_ASSIGN_OR_RETURN(nlohmann::json out,
                          FollowUps(*engine, seq, follow_up, questions,
                                    static_cast<uint64_t>(seed) + static_cast<uint64_t>(seq)));
      out["preset"] = preset;
      out["layers"] = layers;
      out["policy"] = options.policy_file;
      if (world.rank == 0) std::cout << out.dump() << std::endl;
    }
    return OkStatus();
  }
  if (flags.GetBool("decode-only")) {
    for (int64_t seq : seqs) {
      MP_ASSIGN_OR_RETURN(nlohmann::json out, DecodeOnly(*engine, seq, decode_tokens));
      out["preset"] = preset;
      out["layers"] = layers;
      out["model_layers"] = full_layers;
      if (world.rank == 0) std::cout << out.dump() << std::endl;
    }
    return OkStatus();
  }
  for (int64_t seq : seqs) {
    engine->ResetStats();
    MP_ASSIGN_OR_RETURN(GenerationResult result, job(seq, static_cast<uint64_t>(seed) + seq));
    MP_RETURN_IF_ERROR(first_token_status);
    // Steady-state decode: the median time between tokens.
    std::vector<double> sorted = token_ms;
    std::sort(sorted.begin(), sorted.end());
    const double median_ms = sorted.empty() ? 0.0 : sorted[sorted.size() / 2];
    MP_ASSIGN_OR_RETURN(nlohmann::json prefill_stats, GatherStats(*engine, at_first_token));
    MP_ASSIGN_OR_RETURN(nlohmann::json decode_stats,
                        GatherStats(*engine, Minus(engine->stats(), at_first_token)));
    double gemm_s = -1;
    if (flags.GetBool("gemm-reference") && world.rank == 0) {
      // Each rank runs about seq / N tokens through the GEMMs.
      const int64_t tokens = (seq + world.size - 1) / world.size;
      MP_ASSIGN_OR_RETURN(
          gemm_s, GemmReferenceSeconds(engine->backend(), config, options.random_weights.dtype,
                                       options.prefill_chunk, tokens, layers));
    }
    if (world.rank != 0) continue;
    const std::vector<int32_t> first(result.ids.begin(),
                                     result.ids.begin() + std::min<size_t>(8, result.ids.size()));
    nlohmann::json out = {
        {"bench", "e2e"},
        {"preset", preset},
        {"layers", layers},
        {"model_layers", full_layers},
        {"ranks", world.size},
        {"backend", BackendKindName(options.backend)},
        {"seq", seq},
        {"ttft_s", result.ttft_s},
        {"prefill_s", prefill_all_ranks_s},
        {"prefill_tokens_per_s", static_cast<double>(seq) / prefill_all_ranks_s},
        {"prefill_attended_pairs", result.prefill.attended_pairs},
        {"prefill_causal_pairs", result.prefill.causal_pairs},
        {"prefill_s_full_model",
         prefill_all_ranks_s * static_cast<double>(full_layers) / static_cast<double>(layers)},
        {"decode_tokens", static_cast<int64_t>(result.ids.size()) - 1},
        {"decode_ms_per_token", median_ms},
        {"decode_tokens_per_s", median_ms > 0 ? 1000.0 / median_ms : 0.0},
        {"first_ids", first},
        {"token_ms", token_ms},
        {"profile", options.profile},
        {"load_s", load_s},
        {"prefill_stats", prefill_stats},
        {"decode_stats", decode_stats},
    };
    if (gemm_s >= 0) out["gemm_reference_s"] = gemm_s;
    std::cout << out.dump() << std::endl;
  }
  return OkStatus();
}

}  // namespace
}  // namespace millipede

int main(int argc, char** argv) {
  return millipede::RunMpiMain("millipede-bench-e2e", argc, argv, millipede::Run);
}
