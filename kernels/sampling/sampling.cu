#include <cstdint>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cuda/functional>
#include <limits>

#include "common/cuda_check.h"
#include "kernels/cuda_util.cuh"
#include "kernels/random.h"
#include "kernels/sampling/sampling_cuda.h"

namespace millipede {
namespace sample_cuda_internal {

// What the kernels report back to the host.
struct SampleResult {
  int32_t token;       // the pick, or -1 when the logits are invalid
  int32_t bad_index;   // the first NaN or +inf logit, or vocab when there is none
  int32_t num_finite;  // logits above -inf
};

}  // namespace sample_cuda_internal

using sample_cuda_internal::SampleResult;

struct SampleCudaWorkspace::Impl {
  SampleResult* device_result = nullptr;
  SampleResult* host_result = nullptr;  // pinned, so the copy back is a true async copy
  // Sorted logits, ids in, ids out, then CUB's temporary storage.
  cuda_util::DeviceScratch sort;
  int64_t sort_vocab = -1;  // the vocabulary sort_temp_bytes was measured for
  size_t sort_temp_bytes = 0;

  ~Impl() {
    if (device_result != nullptr) cudaFree(device_result);
    if (host_result != nullptr) cudaFreeHost(host_result);
  }
};

namespace {

// One block does the whole scan and the whole pick: a vocabulary is ~10^5 floats, which a
// single SM streams in a few microseconds, and one block needs no cross-block handshake.
constexpr int kThreads = 1024;

struct ArgMax {
  float value;
  int32_t index;
};

// The larger value; equal values go to the lower index (the reference's strict `>` scan).
struct ArgMaxOp {
  __device__ ArgMax operator()(const ArgMax& a, const ArgMax& b) const {
    if (a.value != b.value) return a.value > b.value ? a : b;
    return a.index < b.index ? a : b;
  }
};

// Validates the logits (first NaN or +inf, count of finite values) and finds the argmax, which
// (or -1 for invalid logits) goes to result->token and, when non-null, to `token`: the answer for
// greedy. Sampling passes a null `token` and an `ids` to fill with 0..vocab-1 for the sort.
//   logits [vocab], ids (or null) [vocab].
__global__ void __launch_bounds__(kThreads)
    SampleScanKernel(const float* __restrict__ logits, int32_t vocab, int32_t* __restrict__ ids,
                     SampleResult* __restrict__ result, int32_t* __restrict__ token) {
  using ArgMaxReduce = cub::BlockReduce<ArgMax, kThreads>;
  using IntReduce = cub::BlockReduce<int32_t, kThreads>;
  __shared__ union {
    typename ArgMaxReduce::TempStorage arg_max;
    typename IntReduce::TempStorage ints;
  } storage;

  ArgMax best{-INFINITY, INT32_MAX};
  int32_t bad = vocab;
  int32_t finite = 0;
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
    const float x = logits[i];
    if (ids != nullptr) ids[i] = static_cast<int32_t>(i);
    if (isnan(x) || x == INFINITY) {
      bad = min(bad, static_cast<int32_t>(i));
      continue;
    }
    if (x != -INFINITY) ++finite;
    if (x > best.value) best = {x, static_cast<int32_t>(i)};
  }
  const ArgMax block_best = ArgMaxReduce(storage.arg_max).Reduce(best, ArgMaxOp());
  __syncthreads();
  const int32_t block_bad = IntReduce(storage.ints).Reduce(bad, cuda::minimum<>{});
  __syncthreads();
  const int32_t block_finite = IntReduce(storage.ints).Sum(finite);
  if (threadIdx.x == 0) {
    const bool valid = block_bad == vocab && block_finite > 0;
    result->bad_index = block_bad;
    result->num_finite = block_finite;
    result->token = valid ? block_best.index : -1;
    if (token != nullptr) *token = result->token;
  }
}

// The reference's draw over the sorted logits. Thread t owns a contiguous slice of the kept
// tokens and sums their weights exp(s_i - s_0) (s = logit / temperature, all in double); an
// exclusive scan of the slice sums gives each thread its starting cumulative weight, so the
// top-p cut, the min-p cut and the draw are each one pass in which the first thread to cross
// records its index. Only the association of the double sums differs from the reference's
// sequential loop.
//   sorted_logits, sorted_ids [vocab]: logits descending, equal logits in increasing id order.
__global__ void __launch_bounds__(kThreads)
    SamplePickKernel(const float* __restrict__ sorted_logits,
                     const int32_t* __restrict__ sorted_ids, int32_t vocab, float temperature,
                     int32_t top_k, float top_p, float min_p, double u,
                     SampleResult* __restrict__ result, int32_t* __restrict__ token) {
  using Scan = cub::BlockScan<double, kThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  __shared__ int32_t cut_index, min_p_count, draw_index, last_weighted;
  __shared__ double cut_total;

  // The scan kernel has already reported invalid logits (token -1).
  if (result->bad_index != vocab || result->num_finite == 0) {
    if (threadIdx.x == 0 && token != nullptr) *token = -1;
    return;
  }
  // -inf sorts last, so the finite logits are the first num_finite.
  const int32_t num_finite = result->num_finite;
  const int64_t kept = top_k > 0 && top_k < num_finite ? top_k : num_finite;
  const double t = temperature;
  const double s0 = static_cast<double>(sorted_logits[0]) / t;
  const auto weight = [&](int64_t i) {
    return exp(static_cast<double>(sorted_logits[i]) / t - s0);
  };
  const int64_t chunk = (kept + kThreads - 1) / kThreads;
  const int64_t begin = min(kept, threadIdx.x * chunk);
  const int64_t end = min(kept, begin + chunk);
  if (threadIdx.x == 0) {
    cut_index = static_cast<int32_t>(kept);
    min_p_count = static_cast<int32_t>(kept);
    draw_index = static_cast<int32_t>(kept);
    last_weighted = 0;
  }
  __syncthreads();

  double slice_sum = 0.0;
  for (int64_t i = begin; i < end; ++i) slice_sum += weight(i);
  double prefix = 0.0, total = 0.0;
  Scan(scan_storage).ExclusiveSum(slice_sum, prefix, total);

  // Top-p keeps tokens up to the first whose cumulative weight reaches top_p * total (so at
  // least one); min-p keeps those whose weight (p_i / p_max) is at least min_p (the best token,
  // weight 1, always). Weights fall along the sorted order, so both keep a prefix; the shorter
  // one wins, and its cumulative weight becomes the total the draw is scaled by.
  if (top_p < 1.0f) {
    const double target = static_cast<double>(top_p) * total;
    double cumulative = prefix;
    for (int64_t i = begin; i < end; ++i) {
      cumulative += weight(i);
      if (cumulative >= target) {
        atomicMin(&cut_index, static_cast<int32_t>(i));
        break;
      }
    }
  }
  if (min_p > 0.0f) {
    for (int64_t i = max(begin, int64_t{1}); i < end; ++i) {
      if (weight(i) < static_cast<double>(min_p)) {
        atomicMin(&min_p_count, static_cast<int32_t>(i));
        break;
      }
    }
  }
  __syncthreads();
  const int64_t count = min(static_cast<int64_t>(min_p_count),
                            cut_index < kept ? static_cast<int64_t>(cut_index) + 1 : kept);
  double kept_total = total;
  if (count < kept) {
    // The thread whose slice holds the last kept token sums up to it.
    if (begin < count && count <= end) {
      double cumulative = prefix;
      for (int64_t i = begin; i < count; ++i) cumulative += weight(i);
      cut_total = cumulative;
    }
    __syncthreads();
    kept_total = cut_total;
  }

  const double target = u * kept_total;
  double cumulative = prefix;
  int64_t last = -1;
  for (int64_t i = begin; i < min(end, count); ++i) {
    const double w = weight(i);
    cumulative += w;
    if (w > 0.0) last = i;
    if (cumulative > target) {
      atomicMin(&draw_index, static_cast<int32_t>(i));
      break;
    }
  }
  if (last >= 0) atomicMax(&last_weighted, static_cast<int32_t>(last));
  __syncthreads();
  if (threadIdx.x == 0) {
    // u * total can round up to the total: the reference then takes the least likely kept token
    // that has any weight.
    const int32_t pick = draw_index < count ? draw_index : last_weighted;
    result->token = sorted_ids[pick];
    if (token != nullptr) *token = result->token;
  }
}

struct SortBuffers {
  float* keys_out;
  int32_t* ids_in;
  int32_t* ids_out;
  void* temp;
  size_t temp_bytes;
};

// Carves the workspace's scratch into the sort's buffers for `vocab`, growing it if needed.
StatusOr<SortBuffers> PrepareSort(SampleCudaWorkspace::Impl& ws, int32_t vocab,
                                  cudaStream_t stream) {
  if (ws.sort_vocab != vocab) {
    size_t temp_bytes = 0;
    MP_CUDA_CHECK(cub::DeviceRadixSort::SortPairsDescending(
        nullptr, temp_bytes, static_cast<const float*>(nullptr), static_cast<float*>(nullptr),
        static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), vocab, 0, 32,
        stream));
    ws.sort_vocab = vocab;
    ws.sort_temp_bytes = temp_bytes;
  }
  const size_t array_bytes = (static_cast<size_t>(vocab) * sizeof(float) + 255) / 256 * 256;
  MP_RETURN_IF_ERROR(ws.sort.Reserve(3 * array_bytes + ws.sort_temp_bytes, stream));
  char* base = static_cast<char*>(ws.sort.data());
  return SortBuffers{reinterpret_cast<float*>(base), reinterpret_cast<int32_t*>(base + array_bytes),
                     reinterpret_cast<int32_t*>(base + 2 * array_bytes), base + 3 * array_bytes,
                     ws.sort_temp_bytes};
}

// Queues the scan, and for sampling the sort and the pick; `token` (or null) gets the result.
Status Enqueue(ConstTensorView logits, const SamplingParams& params, uint64_t step,
               SampleCudaWorkspace::Impl& ws, int32_t* token, cudaStream_t stream) {
  const int32_t vocab = static_cast<int32_t>(logits.dim(0));
  const float* data = logits.as<const float>();
  if (params.temperature == 0.0f) {
    SampleScanKernel<<<1, kThreads, 0, stream>>>(data, vocab, nullptr, ws.device_result, token);
    MP_CUDA_CHECK_LAUNCH();
    return OkStatus();
  }
  MP_ASSIGN_OR_RETURN(const SortBuffers sort, PrepareSort(ws, vocab, stream));
  SampleScanKernel<<<1, kThreads, 0, stream>>>(data, vocab, sort.ids_in, ws.device_result, nullptr);
  MP_CUDA_CHECK_LAUNCH();
  // Radix sort is stable: equal logits keep their increasing-id order, the reference's tie rule
  // (and -0.0 == +0.0, as there).
  size_t temp_bytes = sort.temp_bytes;
  MP_CUDA_CHECK(cub::DeviceRadixSort::SortPairsDescending(
      sort.temp, temp_bytes, data, sort.keys_out, sort.ids_in, sort.ids_out, vocab, 0, 32, stream));
  SamplePickKernel<<<1, kThreads, 0, stream>>>(
      sort.keys_out, sort.ids_out, vocab, params.temperature, params.top_k, params.top_p,
      params.min_p, RandomUniform(params.seed, step), ws.device_result, token);
  MP_CUDA_CHECK_LAUNCH();
  return OkStatus();
}

}  // namespace

SampleCudaWorkspace::SampleCudaWorkspace() : impl_(std::make_unique<Impl>()) {}
SampleCudaWorkspace::~SampleCudaWorkspace() = default;

StatusOr<std::unique_ptr<SampleCudaWorkspace>> SampleCudaWorkspace::Create() {
  auto workspace = std::unique_ptr<SampleCudaWorkspace>(new SampleCudaWorkspace());
  Impl& impl = *workspace->impl_;
  MP_CUDA_CHECK(cudaMalloc(&impl.device_result, sizeof(SampleResult)));
  MP_CUDA_CHECK(cudaMallocHost(&impl.host_result, sizeof(SampleResult)));
  return workspace;
}

Status SampleCudaWorkspace::Reserve(int64_t max_vocab, cudaStream_t stream) {
  MP_REQUIRE(max_vocab > 0 && max_vocab <= std::numeric_limits<int32_t>::max(),
             "sampling: vocab size ", max_vocab, " must lie in [1, 2^31)");
  return PrepareSort(*impl_, static_cast<int32_t>(max_vocab), stream).status();
}

StatusOr<int32_t> SampleCuda(ConstTensorView logits, const SamplingParams& params, uint64_t step,
                             SampleCudaWorkspace& workspace, cudaStream_t stream) {
  MP_RETURN_IF_ERROR(SampleCheckArgs(logits, params));
  SampleCudaWorkspace::Impl& ws = workspace.impl();
  MP_RETURN_IF_ERROR(Enqueue(logits, params, step, ws, nullptr, stream));
  MP_CUDA_CHECK(cudaMemcpyAsync(ws.host_result, ws.device_result, sizeof(SampleResult),
                                cudaMemcpyDeviceToHost, stream));
  MP_CUDA_CHECK(cudaStreamSynchronize(stream));
  const SampleResult result = *ws.host_result;
  const int64_t vocab = logits.dim(0);
  if (result.bad_index != vocab) {
    float value = 0.0f;
    MP_CUDA_CHECK(cudaMemcpy(&value, logits.as<const float>() + result.bad_index, sizeof(float),
                             cudaMemcpyDeviceToHost));
    return InvalidArgumentError(
        detail::StrCat("sampling: logit ", result.bad_index, " is ", value));
  }
  MP_REQUIRE(result.num_finite > 0, "sampling: every logit is -inf; no token can be chosen");
  MP_ASSERT(result.token >= 0 && result.token < vocab, "sampled token ", result.token);
  return result.token;
}

Status SampleCudaAsync(ConstTensorView logits, const SamplingParams& params, uint64_t step,
                       SampleCudaWorkspace& workspace, int32_t* token, cudaStream_t stream) {
  MP_RETURN_IF_ERROR(SampleCheckArgs(logits, params));
  MP_REQUIRE(token != nullptr, "sampling: null token pointer");
  return Enqueue(logits, params, step, workspace.impl(), token, stream);
}

}  // namespace millipede
