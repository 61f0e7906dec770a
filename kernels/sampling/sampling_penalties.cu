#include <algorithm>
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/sampling/sampling_penalties_cuda.h"

namespace millipede {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

struct Penalties {
  double repetition, presence, frequency;
};

// Grid-strided over the vocabulary. No __restrict__ on logits and out: they may alias (each
// element is read, then written, by one thread). Absent tables are null.
__global__ void SamplingPenaltiesKernel(const float* logits, const float* __restrict__ bias,
                                        const uint8_t* __restrict__ prompt_mask,
                                        const int32_t* __restrict__ counts, Penalties p,
                                        int64_t vocab, float* out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < vocab;
       i += stride) {
    const int32_t count = counts != nullptr ? counts[i] : 0;
    double x = static_cast<double>(logits[i]);
    if (bias != nullptr) x = __dadd_rn(x, static_cast<double>(bias[i]));
    if ((prompt_mask != nullptr && prompt_mask[i] != 0) || count > 0)
      x = x > 0 ? __ddiv_rn(x, p.repetition) : __dmul_rn(x, p.repetition);
    const double presence = count > 0 ? p.presence : 0.0;
    x = __dsub_rn(x, __dadd_rn(__dmul_rn(p.frequency, static_cast<double>(count)), presence));
    out[i] = static_cast<float>(x);
  }
}

}  // namespace

Status SamplingPenaltiesCuda(const SamplingPenaltiesArgs& args, cudaStream_t stream) {
  MP_RETURN_IF_ERROR(SamplingPenaltiesCheckArgs(args));
  const int64_t vocab = args.logits.dim(0);
  const int64_t blocks = std::min<int64_t>((vocab + kThreads - 1) / kThreads, kMaxBlocks);
  const Penalties p{args.repetition_penalty, args.presence_penalty, args.frequency_penalty};
  SamplingPenaltiesKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      args.logits.as<const float>(), args.bias.as<const float>(),
      args.prompt_mask.as<const uint8_t>(), args.output_counts.as<const int32_t>(), p, vocab,
      args.out.as<float>());
  MP_CUDA_CHECK_LAUNCH();
  return OkStatus();
}

}  // namespace millipede
