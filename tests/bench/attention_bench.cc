// millipede-bench-attention: times AttentionCuda on one layer's shapes and prints one JSON
// object. Causal prefill of a whole sequence (TFLOP/s with causal FLOPs = 4 * S^2 / 2 * Hq * d)
// and single-token decode over a context (GB/s of K and V read, split-KV as chosen by the
// launcher and, for comparison, unsplit). CUDA-event timing after warm-up runs.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/cuda_check.h"
#include "common/dtype.h"
#include "common/flags.h"
#include "kernels/attention/attention_cuda.h"
#include "kernels/attention/attention_fp8_cuda.h"
#include "kernels/attention/attention_fp8_operands_cuda.h"
#include "tests/bench/bench_cuda_util.h"

namespace millipede {
namespace {

constexpr char kUsage[] = R"(usage: millipede-bench-attention [options]

  --seq S          causal prefill of S tokens (default 32768; 0 skips)
  --ctx N          decode of one token over N cached tokens (default 131072; 0 skips)
  --q-heads H      query heads (default 32)
  --kv-heads H     key/value heads (default 8)
  --head-dim D     64 or 128 (default 128)
  --dtype T        K/V dtype: bf16 (default) | fp16 | fp8 (E4M3)
  --kernel K       prefill kernel: auto (default; wgmma on Hopper) | mma-sync | fp8 (FP8
                   attention, AttentionFp8Cuda: its operands pass timed within and alone,
                   and its error against the bf16 kernel's output on the same inputs)
  --decode-splits L  comma-separated key splits to time decode with (default 0,1: the
                   launcher's choice and unsplit)
  --warmup N       untimed runs first (default 3)
  --iters N        timed runs, averaged (default 10)
  --window W       A-shape prefill (MInference's A-shape, StreamingLLM's heads): every KV head
                   sees the --sinks first keys and the last W; reports the attended share of the
                   causal pairs ("density") and TFLOP/s over the attended pairs (default 0:
                   causal)
  --sinks N        sink keys of an A-shape prefill (default 0)
)";

struct Shapes {
  int64_t q_heads, kv_heads, head_dim, warmup, iters;
  DType dtype;
  bool allow_wgmma = true;
  bool fp8 = false;  // prefill on AttentionFp8Cuda
  std::vector<int64_t> decode_splits = {0, 1};
  // A-shape prefill (every KV head): the first `sinks` keys and a recent window; 0: causal.
  int64_t window = 0, sinks = 0;
};

// Causal query-key pairs of one head that an A-shape head of `window` and `sinks` attends over
// `seq` tokens (window 0: all of them).
double AttendedPairs(int64_t seq, int64_t window, int64_t sinks) {
  double pairs = 0;
  for (int64_t p = 0; p < seq; ++p) {
    const int64_t visible = p + 1;
    if (window <= 0 || visible <= window) {
      pairs += static_cast<double>(visible);
    } else {
      pairs += static_cast<double>(window + std::min(sinks, visible - window));
    }
  }
  return pairs;
}

// Rows [begin, end) of a device [rows, heads, head_dim] F32 tensor, on the host.
StatusOr<std::vector<float>> ReadRows(const TensorView& t, int64_t begin, int64_t end) {
  const int64_t row = t.dim(1) * t.dim(2);
  std::vector<float> out(static_cast<size_t>((end - begin) * row));
  MP_CUDA_CHECK(cudaMemcpy(out.data(), t.as<float>() + begin * row, out.size() * sizeof(float),
                           cudaMemcpyDeviceToHost));
  return out;
}

// FP8 attention on the same inputs as the bf16 kernel: its time (operands pass included), the
// operands pass alone, and its error against the bf16 kernel's o over the first, a middle and
// the last 256 rows: the largest |difference| / max |o_bf16| and the RMS difference / RMS o.
StatusOr<nlohmann::json> BenchPrefillFp8(const Shapes& s, int64_t seq, const AttentionArgs& args) {
  AttentionCudaOptions options;
  MP_ASSIGN_OR_RETURN(const size_t workspace_bytes, AttentionFp8CudaWorkspaceBytes(args, options));
  DeviceBuffer workspace;
  MP_RETURN_IF_ERROR(workspace.Allocate(workspace_bytes));
  options.workspace = workspace.data();
  options.workspace_bytes = workspace_bytes;
  MP_ASSIGN_OR_RETURN(
      const double ms,
      TimeMs([&] { return AttentionFp8Cuda(args, options, nullptr); }, s.warmup, s.iters));
  // The operands pass alone, into the same workspace (the call's first step).
  const int64_t n = seq, h = s.kv_heads, d = s.head_dim;
  char* const ws = static_cast<char*>(workspace.data());
  DeviceBuffer scales;
  MP_RETURN_IF_ERROR(scales.Allocate((h * Fp8AttentionKeyBlocks(n) + h * d) * sizeof(float)));
  float* const k_scale = static_cast<float*>(scales.data());
  const Fp8AttentionOperandsArgs operands{
      args.k,
      args.v,
      {ws, DType::kF8E4M3, {n, h, d}},
      {k_scale, DType::kF32, {h, Fp8AttentionKeyBlocks(n)}},
      {ws + n * h * d, DType::kF8E4M3, {h, d, Fp8AttentionPaddedKeys(n)}},
      {k_scale + h * Fp8AttentionKeyBlocks(n), DType::kF32, {h, d}}};
  MP_ASSIGN_OR_RETURN(
      const double operands_ms,
      TimeMs([&] { return Fp8AttentionOperandsCuda(operands, nullptr); }, s.warmup, s.iters));
  // The error against the bf16 kernel: run both once more, the bf16 one into its own o.
  MP_RETURN_IF_ERROR(AttentionFp8Cuda(args, options, nullptr));
  DeviceBuffer o16;
  MP_RETURN_IF_ERROR(o16.Allocate(args.o.NumElements() * sizeof(float)));
  AttentionArgs args16 = args;
  args16.o.data = o16.data();
  MP_RETURN_IF_ERROR(AttentionCuda(args16, AttentionCudaOptions{}, nullptr));
  MP_CUDA_CHECK(cudaDeviceSynchronize());
  double max_ref = 0.0, max_diff = 0.0, sum_sq = 0.0, sum_sq_diff = 0.0;
  const int64_t rows = std::min<int64_t>(256, seq);
  for (const int64_t begin : {int64_t{0}, (seq - rows) / 2, seq - rows}) {
    MP_ASSIGN_OR_RETURN(const std::vector<float> a, ReadRows(args.o, begin, begin + rows));
    MP_ASSIGN_OR_RETURN(const std::vector<float> b, ReadRows(args16.o, begin, begin + rows));
    for (size_t i = 0; i < a.size(); ++i) {
      max_ref = std::max(max_ref, static_cast<double>(std::fabs(b[i])));
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(a[i] - b[i])));
      sum_sq += static_cast<double>(b[i]) * b[i];
      sum_sq_diff += static_cast<double>(a[i] - b[i]) * (a[i] - b[i]);
    }
  }
  const double flops = 4.0 * static_cast<double>(seq) * seq / 2.0 * s.q_heads * s.head_dim;
  return nlohmann::json{{"seq", seq},
                        {"kernel", "fp8"},
                        {"ms", ms},
                        {"tflops", flops / (ms * 1e-3) / 1e12},
                        {"operands_ms", operands_ms},
                        {"kernel_tflops", flops / ((ms - operands_ms) * 1e-3) / 1e12},
                        {"max_error_vs_bf16", max_ref > 0 ? max_diff / max_ref : 0.0},
                        {"rms_error_vs_bf16", sum_sq > 0 ? std::sqrt(sum_sq_diff / sum_sq) : 0.0}};
}

StatusOr<nlohmann::json> BenchPrefill(const Shapes& s, int64_t seq) {
  DeviceBuffer q, k, v, o, lse;
  MP_RETURN_IF_ERROR(FillRandom(&q, DType::kF32, {seq, s.q_heads, s.head_dim}, 1));
  MP_RETURN_IF_ERROR(FillRandom(&k, s.dtype, {seq, s.kv_heads, s.head_dim}, 2));
  MP_RETURN_IF_ERROR(FillRandom(&v, s.dtype, {seq, s.kv_heads, s.head_dim}, 3));
  MP_RETURN_IF_ERROR(o.Allocate(seq * s.q_heads * s.head_dim * sizeof(float)));
  MP_RETURN_IF_ERROR(lse.Allocate(seq * s.q_heads * sizeof(float)));
  AttentionArgs args{{q.data(), DType::kF32, {seq, s.q_heads, s.head_dim}},
                     {k.data(), s.dtype, {seq, s.kv_heads, s.head_dim}},
                     {v.data(), s.dtype, {seq, s.kv_heads, s.head_dim}},
                     0,
                           0,
                           AttentionMask::kCausal,
                           0.0f,
                           {o.data(), DType::kF32, {seq, s.q_heads, s.head_dim}},
                           {lse.data(), DType::kF32, {seq, s.q_heads}}};
  const std::vector<int64_t> windows(static_cast<size_t>(s.kv_heads), s.window);
  if (s.window > 0) {
    args.kv_head_window = windows.data();
    args.sink_tokens = s.sinks;
  }
  if (s.fp8) return BenchPrefillFp8(s, seq, args);
  AttentionCudaOptions options;
  options.allow_wgmma = s.allow_wgmma;
  MP_ASSIGN_OR_RETURN(const size_t workspace_bytes, AttentionCudaWorkspaceBytes(args, options));
  DeviceBuffer workspace;
  if (workspace_bytes > 0) MP_RETURN_IF_ERROR(workspace.Allocate(workspace_bytes));
  options.workspace = workspace.data();
  options.workspace_bytes = workspace_bytes;
  MP_ASSIGN_OR_RETURN(const double ms, TimeMs([&] { return AttentionCuda(args, options, nullptr); },
                                              s.warmup, s.iters));
  const double flops = 4.0 * static_cast<double>(seq) * seq / 2.0 * s.q_heads * s.head_dim;
  nlohmann::json out{{"seq", seq},
                     {"kernel", s.allow_wgmma ? "auto" : "mma-sync"},
                     {"ms", ms},
                     {"tflops", flops / (ms * 1e-3) / 1e12}};
  if (s.window > 0) {
    // FLOP/s over the pairs the heads attend, and their share of the causal pairs.
    const double pairs = AttendedPairs(seq, s.window, s.sinks);
    const double causal = static_cast<double>(seq) * (seq + 1) / 2.0;
    out["window"] = s.window;
    out["sinks"] = s.sinks;
    out["density"] = pairs / causal;
    out["tflops"] = 4.0 * pairs * s.q_heads * s.head_dim / (ms * 1e-3) / 1e12;
  }
  return out;
}

StatusOr<nlohmann::json> BenchDecode(const Shapes& s, int64_t ctx) {
  DeviceBuffer q, k, v, o, lse;
  MP_RETURN_IF_ERROR(FillRandom(&q, DType::kF32, {1, s.q_heads, s.head_dim}, 4));
  MP_RETURN_IF_ERROR(FillRandom(&k, s.dtype, {ctx, s.kv_heads, s.head_dim}, 5));
  MP_RETURN_IF_ERROR(FillRandom(&v, s.dtype, {ctx, s.kv_heads, s.head_dim}, 6));
  MP_RETURN_IF_ERROR(o.Allocate(s.q_heads * s.head_dim * sizeof(float)));
  MP_RETURN_IF_ERROR(lse.Allocate(s.q_heads * sizeof(float)));
  // The engine's decode step: every cached key precedes the token, no mask.
  const AttentionArgs args{{q.data(), DType::kF32, {1, s.q_heads, s.head_dim}},
                           {k.data(), s.dtype, {ctx, s.kv_heads, s.head_dim}},
                           {v.data(), s.dtype, {ctx, s.kv_heads, s.head_dim}},
                           ctx,
                           0,
                           AttentionMask::kNone,
                           0.0f,
                           {o.data(), DType::kF32, {1, s.q_heads, s.head_dim}},
                           {lse.data(), DType::kF32, {1, s.q_heads}}};
  const double kv_bytes = 2.0 * ctx * s.kv_heads * s.head_dim * DTypeSize(s.dtype);
  nlohmann::json result{{"ctx", ctx}, {"kv_bytes", kv_bytes}};
  for (const int64_t splits : s.decode_splits) {
    AttentionCudaOptions options;
    options.num_splits = static_cast<int>(splits);
    MP_ASSIGN_OR_RETURN(const size_t workspace_bytes, AttentionCudaWorkspaceBytes(args, options));
    DeviceBuffer workspace;
    if (workspace_bytes > 0) MP_RETURN_IF_ERROR(workspace.Allocate(workspace_bytes));
    options.workspace = workspace.data();
    options.workspace_bytes = workspace_bytes;
    MP_ASSIGN_OR_RETURN(
        const double ms,
        TimeMs([&] { return AttentionCuda(args, options, nullptr); }, s.warmup, s.iters));
    const std::string key = splits == 0   ? std::string("split")
                            : splits == 1 ? std::string("unsplit")
                                          : "splits_" + std::to_string(splits);
    result[key] = {{"us", ms * 1e3},
                   {"gb_per_s", kv_bytes / (ms * 1e-3) / 1e9},
                   {"workspace_bytes", workspace_bytes}};
  }
  return result;
}

Status Run(int argc, char** argv) {
  MP_ASSIGN_OR_RETURN(const Flags flags, Flags::Parse(argc, argv, {"help"}));
  if (flags.GetBool("help")) {
    std::cout << kUsage;
    return OkStatus();
  }
  MP_RETURN_IF_ERROR(flags.CheckKnown(
      {"help", "seq", "ctx", "q-heads", "kv-heads", "head-dim", "dtype", "kernel",
       "decode-splits", "warmup", "iters", "window", "sinks"}));
  Shapes s;
  MP_ASSIGN_OR_RETURN(const int64_t seq, flags.GetInt("seq", 32768));
  MP_ASSIGN_OR_RETURN(const int64_t ctx, flags.GetInt("ctx", 131072));
  MP_ASSIGN_OR_RETURN(s.q_heads, flags.GetInt("q-heads", 32));
  MP_ASSIGN_OR_RETURN(s.kv_heads, flags.GetInt("kv-heads", 8));
  MP_ASSIGN_OR_RETURN(s.head_dim, flags.GetInt("head-dim", 128));
  MP_ASSIGN_OR_RETURN(s.warmup, flags.GetInt("warmup", 3));
  MP_ASSIGN_OR_RETURN(s.iters, flags.GetInt("iters", 10));
  MP_ASSIGN_OR_RETURN(s.window, flags.GetInt("window", 0));
  MP_ASSIGN_OR_RETURN(s.sinks, flags.GetInt("sinks", 0));
  MP_REQUIRE(s.window >= 0 && s.sinks >= 0, "--window and --sinks must be >= 0");
  MP_ASSIGN_OR_RETURN(s.dtype, ParseKvDTypeName(flags.Get("dtype").value_or("bf16")));
  MP_REQUIRE(s.dtype == DType::kBF16 || s.dtype == DType::kF16 || s.dtype == DType::kF8E4M3,
             "--dtype must be bf16, fp16 or fp8");
  const std::string kernel = flags.Get("kernel").value_or("auto");
  MP_REQUIRE(kernel == "auto" || kernel == "mma-sync" || kernel == "fp8",
             "--kernel must be auto, mma-sync or fp8");
  s.allow_wgmma = kernel != "mma-sync";
  s.fp8 = kernel == "fp8";
  MP_REQUIRE(!s.fp8 || s.dtype == DType::kBF16 || s.dtype == DType::kF16,
             "--kernel fp8 takes bf16 or fp16 K/V (it rounds them to E4M3 itself)");
  if (const std::optional<std::string> list = flags.Get("decode-splits")) {
    s.decode_splits.clear();
    for (size_t begin = 0; begin <= list->size();) {
      const size_t end = std::min(list->find(',', begin), list->size());
      const std::string item = list->substr(begin, end - begin);
      char* parse_end = nullptr;
      const long long value = std::strtoll(item.c_str(), &parse_end, 10);
      MP_REQUIRE(!item.empty() && *parse_end == '\0' && value >= 0 && value <= 1024,
                 "--decode-splits: bad entry '", item, "'");
      s.decode_splits.push_back(value);
      begin = end + 1;
    }
  }
  MP_REQUIRE(seq >= 0 && ctx >= 0 && s.iters > 0 && s.warmup >= 0 && s.q_heads > 0 &&
                 s.kv_heads > 0 && s.q_heads % s.kv_heads == 0 && s.head_dim > 0,
             "bad sizes (see --help)");

  int device = 0;
  cudaDeviceProp prop{};
  MP_CUDA_CHECK(cudaGetDevice(&device));
  MP_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  nlohmann::json out{
      {"bench", "attention"},        {"device", prop.name},    {"sms", prop.multiProcessorCount},
      {"q_heads", s.q_heads},        {"kv_heads", s.kv_heads}, {"head_dim", s.head_dim},
      {"dtype", DTypeName(s.dtype)}, {"warmup", s.warmup},     {"iters", s.iters}};
  if (seq > 0) {
    MP_ASSIGN_OR_RETURN(out["prefill_causal"], BenchPrefill(s, seq));
  }
  if (ctx > 0) {
    MP_ASSIGN_OR_RETURN(out["decode"], BenchDecode(s, ctx));
  }
  std::cout << out.dump(2) << "\n";
  return OkStatus();
}

}  // namespace
}  // namespace millipede

int main(int argc, char** argv) {
  const millipede::Status status = millipede::Run(argc, argv);
  if (!status.ok()) {
    std::cerr << "millipede-bench-attention: " << status.ToString() << "\n";
    return 1;
  }
  return 0;
}
