#include <cstdint>
#include <cub/block/block_reduce.cuh>
#include <cuda/functional>

#include "common/cuda_check.h"
#include "kernels/sampling/sampling_logprobs_cuda.h"

namespace millipede {
namespace {

// One block streams the vocabulary twice (max, then the sum of exponentials): ~10^5 floats, a
// few microseconds on one SM, with no cross-block handshake.
constexpr int kThreads = 1024;

// lse over `logits`, then token_logprob and top_logprobs (which holds the top logits on entry).
//   logits [vocab]; top_logprobs [k] in place; token_logprob [1].
__global__ void __launch_bounds__(kThreads)
    SamplingLogprobsKernel(const float* __restrict__ logits, int64_t vocab, int32_t token,
                           float* __restrict__ top_logprobs, int64_t k,
                           float* __restrict__ token_logprob) {
  using Reduce = cub::BlockReduce<double, kThreads>;
  __shared__ typename Reduce::TempStorage storage;
  __shared__ double shared_max, shared_lse;

  double max = -INFINITY;
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads)
    max = fmax(max, static_cast<double>(logits[i]));
  const double block_max = Reduce(storage).Reduce(max, cuda::maximum<>{});
  if (threadIdx.x == 0) shared_max = block_max;
  __syncthreads();
  const double m = shared_max;
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads)
    sum += exp(static_cast<double>(logits[i]) - m);
  const double block_sum = Reduce(storage).Sum(sum);
  if (threadIdx.x == 0) shared_lse = m + log(block_sum);
  __syncthreads();
  const double lse = shared_lse;
  if (threadIdx.x == 0)
    *token_logprob = static_cast<float>(static_cast<double>(logits[token]) - lse);
  for (int64_t i = threadIdx.x; i < k; i += kThreads)
    top_logprobs[i] = static_cast<float>(static_cast<double>(top_logprobs[i]) - lse);
}

}  // namespace

Status SamplingLogprobsCuda(const SamplingLogprobsArgs& args, TopKCudaWorkspace& top_k,
                            cudaStream_t stream) {
  MP_RETURN_IF_ERROR(SamplingLogprobsCheckArgs(args));
  const int64_t vocab = args.logits.dim(0), k = args.top_ids.dim(0);
  if (k > 0) {
    TopKArgs select;
    MP_ASSIGN_OR_RETURN(select.scores, Reshape(args.logits, Shape{1, vocab}));
    select.k = k;
    MP_ASSIGN_OR_RETURN(select.index, Reshape(args.top_ids, Shape{1, k}));
    MP_ASSIGN_OR_RETURN(select.value, Reshape(args.top_logprobs, Shape{1, k}));
    MP_RETURN_IF_ERROR(TopKCuda(select, top_k, stream));
  }
  SamplingLogprobsKernel<<<1, kThreads, 0, stream>>>(args.logits.as<const float>(), vocab,
                                                     args.token, args.top_logprobs.as<float>(), k,
                                                     args.token_logprob.as<float>());
  MP_CUDA_CHECK_LAUNCH();
  return OkStatus();
}

}  // namespace millipede
