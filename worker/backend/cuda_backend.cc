#include "worker/backend/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "common/cuda_check.h"
#include "kernels/attention/attention_cuda.h"
#include "kernels/attention/attention_fp8_cuda.h"
#include "kernels/attention/batch_decode_attention_cuda.h"
#include "kernels/attention/merge_state_cuda.h"
#include "kernels/attention/sparse_attention_cuda.h"
#include "kernels/layer/add_parts_cuda.h"
#include "kernels/layer/embedding_cuda.h"
#include "kernels/layer/gemm_cuda.h"
#include "kernels/layer/rms_norm_cuda.h"
#include "kernels/layer/rope_cuda.h"
#include "kernels/layer/rope_kv_cuda.h"
#include "kernels/layer/silu_mul_cuda.h"
#include "kernels/memory/convert_cuda.h"
#include "kernels/memory/copy_heads_cuda.h"
#include "kernels/memory/gather_rows_cuda.h"
#include "kernels/sampling/sampling_cuda.h"
#include "kernels/sampling/sampling_logprobs_cuda.h"
#include "kernels/sampling/sampling_penalties_cuda.h"
#include "kernels/selection/batch_token_scores_cuda.h"
#include "kernels/selection/key_scores_cuda.h"
#include "kernels/selection/selection_index_cuda.h"
#include "kernels/selection/token_scores_cuda.h"
#include "kernels/selection/top_k_cuda.h"
#include "kernels/selection/top_k_cut_cuda.h"
#include "kernels/selection/top_k_keys_cuda.h"
#include "kernels/sparse_index/antidiagonal_select_cuda.h"
#include "kernels/sparse_index/block_mask_index_cuda.h"
#include "kernels/sparse_index/block_sparse_index_cuda.h"
#include "kernels/sparse_index/block_sums_cuda.h"
#include "kernels/sparse_index/sparse_index_pairs_cuda.h"
#include "kernels/sparse_index/vertical_slash_index_cuda.h"
#include "worker/backend/cuda_copy_queue.h"
#include "worker/backend/cuda_paged_memory.h"
#include "worker/backend/cuda_pinned_memory.h"

namespace millipede {
namespace {

// A CUDA graph ready to launch.
class CudaRecordedOps final : public RecordedOps {
 public:
  explicit CudaRecordedOps(cudaGraphExec_t exec) : exec_(exec) {}
  ~CudaRecordedOps() override { cudaGraphExecDestroy(exec_); }
  cudaGraphExec_t exec() const { return exec_; }

 private:
  cudaGraphExec_t exec_;
};

class CudaBackend final : public Backend {
 public:
  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
    if (attention_scratch_ != nullptr) cudaFreeAsync(attention_scratch_, stream_);
    cudaStreamSynchronize(stream_);
    for (void* p : weights_) cudaFree(p);
  }

  static StatusOr<std::unique_ptr<Backend>> Create(int device) {
    int count = 0;
    MP_CUDA_CHECK(cudaGetDeviceCount(&count));
    MP_REQUIRE(device >= 0 && device < count, "GPU ", device, " does not exist (", count,
               " visible)");
    MP_CUDA_CHECK(cudaSetDevice(device));
    auto b = std::unique_ptr<CudaBackend>(new CudaBackend());
    b->device_ = device;
    // Paged memory: the prefix cache's shared KV blocks.
    MP_ASSIGN_OR_RETURN(b->page_bytes_, DevicePageBytes(device));
    MP_ASSIGN_OR_RETURN(b->gemm_, GemmCudaContext::Create());
    MP_ASSIGN_OR_RETURN(b->sample_, SampleCudaWorkspace::Create());
    MP_ASSIGN_OR_RETURN(b->top_k_, TopKCudaWorkspace::Create());
    MP_ASSIGN_OR_RETURN(b->sparse_index_, SparseIndexCudaWorkspace::Create());
    MP_ASSIGN_OR_RETURN(b->gather_error_, GatherErrorWord::Create());
    MP_ASSIGN_OR_RETURN(b->copies_, CudaCopyQueue::Create(b->stream_));
    // Scratch freed by a finished sequence stays in the stream-ordered pool up to this much, for
    // the next one; more goes back to the device at the next synchronisation.
    MP_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&b->pool_, device));
    uint64_t keep = kPoolKeepBytes;
    MP_CUDA_CHECK(cudaMemPoolSetAttribute(b->pool_, cudaMemPoolAttrReleaseThreshold, &keep));
    return std::unique_ptr<Backend>(std::move(b));
  }

  BackendKind kind() const override { return BackendKind::kCuda; }

  StatusOr<BackendTensor> Allocate(DType dtype, const Shape& shape) override {
    MP_ASSIGN_OR_RETURN(size_t bytes, CheckedNumBytes(shape, dtype));
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, std::max<size_t>(bytes, 256));
    if (err != cudaSuccess) {
      cudaGetLastError();  // clear the sticky-free allocation error
      // Memory the scratch pool keeps is the device's too: give it back and try once more.
      TrimPool();
      err = cudaMalloc(&p, std::max<size_t>(bytes, 256));
      if (err != cudaSuccess) {
        cudaGetLastError();
        return GpuOutOfMemory(device_, bytes, shape);
      }
    }
    // cudaFree synchronises the device, so nothing still queued can touch freed memory.
    return BackendTensor(TensorView{p, dtype, shape}, [](void* q) { cudaFree(q); });
  }
  // From the stream-ordered pool, freed on the compute stream: a finished sequence's strategy
  // scratch goes back without waiting for the device (cudaFree would wait for all of it).
  StatusOr<BackendTensor> AllocateScratch(DType dtype, const Shape& shape) override {
    // While a step is recorded a stream-ordered allocation would become the graph's own.
    if (capturing_) return Allocate(dtype, shape);
    MP_ASSIGN_OR_RETURN(size_t bytes, CheckedNumBytes(shape, dtype));
    bytes = std::max<size_t>(bytes, 256);
    void* p = nullptr;
    cudaError_t err = cudaMallocAsync(&p, bytes, stream_);
    if (err != cudaSuccess) {
      cudaGetLastError();
      TrimPool();
      err = cudaMallocAsync(&p, bytes, stream_);
      if (err != cudaSuccess) {
        cudaGetLastError();
        return GpuOutOfMemory(device_, bytes, shape);
      }
    }
    return BackendTensor(TensorView{p, dtype, shape},
                         [stream = stream_](void* q) { cudaFreeAsync(q, stream); });
  }
  int64_t page_bytes() const override { return page_bytes_; }
  StatusOr<BackendTensor> AllocatePaged(DType dtype, const Shape& shape, int64_t chunk_bytes,
                                        const BackendTensor* share, int64_t share_chunks) override {
    MP_REQUIRE(page_bytes_ > 0, "GPU ", device_, " has no paged memory");
    return AllocatePagedDevice(device_, page_bytes_, dtype, shape, chunk_bytes, share,
                               share_chunks);
  }

  StatusOr<std::vector<ConstTensorView>> AdoptWeights(
      std::span<const ConstTensorView> hosts) override {
    std::vector<size_t> offsets;
    size_t bytes = 0;
    for (const ConstTensorView& host : hosts) {
      const size_t element = DTypeSize(host.dtype);
      bytes = (bytes + element - 1) / element * element;
      offsets.push_back(bytes);
      bytes += host.NumBytes();
    }
    char* p = nullptr;
    MP_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 256)));
    weights_.push_back(p);
    std::vector<ConstTensorView> adopted;
    for (size_t i = 0; i < hosts.size(); ++i) {
      const ConstTensorView& host = hosts[i];
      if (host.NumBytes() > 0)
        MP_CUDA_CHECK(
            cudaMemcpy(p + offsets[i], host.data, host.NumBytes(), cudaMemcpyHostToDevice));
      adopted.push_back(ConstTensorView{p + offsets[i], host.dtype, host.shape});
    }
    return adopted;
  }

  Status CopyFromHost(ConstTensorView host_src, TensorView dst) override {
    MP_RETURN_IF_ERROR(CheckCopy(host_src, AsConst(dst)));
    // From pageable memory the copy has consumed the source when this returns.
    MP_CUDA_CHECK(cudaMemcpyAsync(dst.data, host_src.data, host_src.NumBytes(),
                                  cudaMemcpyHostToDevice, stream_));
    return OkStatus();
  }
  Status CopyToHost(ConstTensorView src, TensorView host_dst) override {
    MP_RETURN_IF_ERROR(CheckCopy(src, AsConst(host_dst)));
    MP_CUDA_CHECK(
        cudaMemcpyAsync(host_dst.data, src.data, src.NumBytes(), cudaMemcpyDeviceToHost, stream_));
    MP_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return OkStatus();
  }
  Status Convert(ConstTensorView src, TensorView dst) override {
    return ConvertCuda(src, dst, stream_);
  }
  Status Synchronize() override {
    MP_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return gather_error_->Take("GatherRows");
  }
  DType GemmInputDType(DType weight_dtype) const override {
    // GemmCuda runs BF16/F16 weights on operands of their dtype (see kernels/layer/gemm_cuda.h).
    return weight_dtype == DType::kBF16 || weight_dtype == DType::kF16 ? weight_dtype : DType::kF32;
  }
  StatusOr<BackendMemory> Memory() override {
    size_t free_bytes = 0, total = 0;
    MP_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    return BackendMemory{static_cast<int64_t>(free_bytes), static_cast<int64_t>(total)};
  }

  Status Embedding(const EmbeddingArgs& args) override { return EmbeddingCuda(args, stream_); }
  Status RmsNorm(const RmsNormArgs& args) override { return RmsNormCuda(args, stream_); }
  Status Rope(const RopeArgs& args) override { return RopeCuda(args, stream_); }
  Status RopeKv(const RopeKvArgs& args) override { return RopeKvCuda(args, stream_); }
  Status Gemm(const GemmArgs& args) override { return GemmCuda(args, *gemm_, stream_); }
  Status AddParts(const AddPartsArgs& args) override { return AddPartsCuda(args, stream_); }
  Status SiluMul(const SiluMulArgs& args) override { return SiluMulCuda(args, stream_); }
  Status Attention(const AttentionArgs& args) override {
    MP_ASSIGN_OR_RETURN(const size_t bytes, AttentionCudaWorkspaceBytes(args, {}));
    MP_ASSIGN_OR_RETURN(const AttentionCudaOptions options, AttentionScratch(bytes));
    return AttentionCuda(args, options, stream_);
  }
  Status AttentionFp8(const AttentionArgs& args) override {
    MP_ASSIGN_OR_RETURN(const size_t bytes, AttentionFp8CudaWorkspaceBytes(args, {}));
    MP_ASSIGN_OR_RETURN(const AttentionCudaOptions options, AttentionScratch(bytes));
    return AttentionFp8Cuda(args, options, stream_);
  }
  Status BatchDecodeAttention(const BatchDecodeAttentionArgs& args) override {
    MP_ASSIGN_OR_RETURN(const size_t bytes, BatchDecodeAttentionCudaWorkspaceBytes(args, {}));
    MP_ASSIGN_OR_RETURN(const AttentionCudaOptions options, AttentionScratch(bytes));
    return BatchDecodeAttentionCuda(args, options, stream_);
  }
  Status SparseAttention(const SparseAttentionArgs& args) override {
    return SparseAttentionCuda(args, stream_);
  }
  Status SparseIndexPairs(const SparseIndexPairsArgs& args) override {
    return SparseIndexPairsCuda(args, stream_);
  }
  Status MergeState(const MergeStateArgs& args) override { return MergeStateCuda(args, stream_); }
  Status MergeStateInPlace(TensorView o, TensorView lse, ConstTensorView o_other,
                           ConstTensorView lse_other) override {
    return MergeStateInPlaceCuda(o, lse, o_other, lse_other, stream_);
  }
  Status ClearState(TensorView o, TensorView lse) override {
    return ClearStateCuda(o, lse, stream_);
  }
  StatusOr<int32_t> Sample(ConstTensorView logits, const SamplingParams& params,
                           uint64_t step) override {
    return SampleCuda(logits, params, step, *sample_, stream_);
  }
  Status SamplingPenalties(const SamplingPenaltiesArgs& args) override {
    return SamplingPenaltiesCuda(args, stream_);
  }
  Status SamplingLogprobs(const SamplingLogprobsArgs& args) override {
    return SamplingLogprobsCuda(args, *top_k_, stream_);
  }

  // Selection ops, pinned host memory and the copy queue (see backend.h).
  Status TopK(const TopKArgs& args) override { return TopKCuda(args, *top_k_, stream_); }
  Status TopKKeys(const TopKKeysArgs& args) override { return TopKKeysCuda(args, stream_); }
  Status TopKCut(const TopKCutArgs& args) override { return TopKCutCuda(args, stream_); }
  Status KeyScores(const KeyScoresArgs& args) override { return KeyScoresCuda(args, stream_); }
  Status TokenScores(const TokenScoresArgs& args) override {
    return TokenScoresCuda(args, stream_);
  }
  Status BatchTokenScores(const BatchTokenScoresArgs& args) override {
    return BatchTokenScoresCuda(args, stream_);
  }
  Status SelectionIndex(const SelectionIndexArgs& args) override {
    return SelectionIndexCuda(args, stream_);
  }
  Status GatherRows(const GatherRowsArgs& args) override {
    return GatherRowsCuda(args, gather_error_->device(), stream_);
  }
  Status CopyHeads(const CopyHeadsArgs& args) override { return CopyHeadsCuda(args, stream_); }
  Status VerticalSlashIndex(const VerticalSlashIndexArgs& args) override {
    return VerticalSlashIndexCuda(args, *sparse_index_, stream_);
  }
  Status BlockSums(const BlockSumsArgs& args) override {
    return BlockSumsCuda(args, *sparse_index_, stream_);
  }
  Status BlockSparseIndex(const BlockSparseIndexArgs& args) override {
    return BlockSparseIndexCuda(args, *sparse_index_, stream_);
  }
  Status AntidiagonalSelect(const AntidiagonalSelectArgs& args) override {
    return AntidiagonalSelectCuda(args, *sparse_index_, *gemm_, stream_);
  }
  Status BlockMaskIndex(const BlockMaskIndexArgs& args) override {
    return BlockMaskIndexCuda(args, *sparse_index_, stream_);
  }
  StatusOr<BackendTensor> AllocateHost(DType dtype, const Shape& shape) override {
    // Any thread may call it (the disk tier reads entries on its own): pin for this device.
    MP_CUDA_CHECK(cudaSetDevice(device_));
    return AllocatePinnedHost(dtype, shape);
  }
  StatusOr<CopyEvent> StartCopy(ConstTensorView src, TensorView dst, CopyOrder order) override {
    return copies_->Copy(src, dst, order);
  }
  StatusOr<CopyEvent> StartGatherRows(const GatherRowsArgs& args, CopyOrder order) override {
    return copies_->Gather(args, order);
  }
  Status ComputeWaitFor(CopyEvent event) override { return copies_->ComputeWaitFor(event); }
  Status WaitCopy(CopyEvent event) override { return copies_->Wait(event); }
  StatusOr<bool> CopyDone(CopyEvent event) override { return copies_->Done(event); }

  // Recording: stream capture of the compute stream (this thread's ops only).
  Status BeginCapture() override {
    MP_REQUIRE(!capturing_, "recording: already recording");
    MP_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    capturing_ = true;
    return OkStatus();
  }
  StatusOr<std::unique_ptr<RecordedOps>> EndCapture() override {
    MP_REQUIRE(capturing_, "recording: not recording");
    capturing_ = false;
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
    if (ended != cudaSuccess) {
      cudaGetLastError();  // an op that may not be recorded invalidated the capture
      if (graph != nullptr) cudaGraphDestroy(graph);
      return FailedPreconditionError(std::string("recording failed: ") +
                                     cudaGetErrorString(ended));
    }
    cudaGraphExec_t exec = nullptr;
    const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    MP_CUDA_CHECK(made);
    return std::unique_ptr<RecordedOps>(new CudaRecordedOps(exec));
  }
  Status Replay(const RecordedOps& ops) override {
    MP_CUDA_CHECK(cudaGraphLaunch(static_cast<const CudaRecordedOps&>(ops).exec(), stream_));
    return OkStatus();
  }
  uint64_t memory_epoch() const override {
    return memory_epoch_ + top_k_->generation() + gemm_->generation();
  }
  bool RunsFp8Attention(int64_t head_dim) const override { return AttentionFp8CudaRuns(head_dim); }
  bool DecodeTakesLengths(int64_t head_dim, int64_t group, DType kv_dtype) const override {
    return BatchDecodeAttentionCudaTakesLengthsFor(head_dim, group, kv_dtype);
  }

 private:
  CudaBackend() = default;
  // What the scratch pool keeps of freed memory (cudaMemPoolAttrReleaseThreshold).
  static constexpr uint64_t kPoolKeepBytes = uint64_t{1} << 30;
  // Returns the pool's free memory to the device (after the frees queued so far).
  void TrimPool() {
    cudaStreamSynchronize(stream_);
    if (pool_ != nullptr) cudaMemPoolTrimTo(pool_, 0);
    cudaGetLastError();
  }
  static Status CheckCopy(ConstTensorView a, ConstTensorView b) {
    MP_REQUIRE(a.dtype == b.dtype, "copy: dtype ", DTypeName(a.dtype), " vs ", DTypeName(b.dtype));
    MP_REQUIRE(a.NumElements() == b.NumElements(), "copy: element counts differ (",
               a.shape.ToString(), " vs ", b.shape.ToString(), ")");
    return OkStatus();
  }
  // Options pointing at `bytes` of attention scratch the backend keeps for split partials (grown,
  // never shrunk), not a stream allocation per call: decode makes many calls per step.
  StatusOr<AttentionCudaOptions> AttentionScratch(size_t bytes) {
    if (bytes > attention_scratch_bytes_) {
      // A recording keeps the scratch's address: it may only grow outside one.
      if (capturing_)
        return FailedPreconditionError("recording: the attention scratch would have to grow");
      ++memory_epoch_;
      if (attention_scratch_ != nullptr) MP_CUDA_CHECK(cudaFreeAsync(attention_scratch_, stream_));
      attention_scratch_ = nullptr;
      attention_scratch_bytes_ = 0;
      MP_CUDA_CHECK(cudaMallocAsync(&attention_scratch_, bytes, stream_));
      attention_scratch_bytes_ = bytes;
    }
    AttentionCudaOptions options;
    options.workspace = attention_scratch_;
    options.workspace_bytes = attention_scratch_bytes_;
    return options;
  }

  int device_ = 0;
  cudaMemPool_t pool_ = nullptr;  // the device's default (stream-ordered) pool
  int64_t page_bytes_ = 0;  // 0: no paged memory
  // The calling thread's default stream: the NCCL data plane orders itself against it.
  cudaStream_t stream_ = cudaStreamPerThread;
  std::unique_ptr<GemmCudaContext> gemm_;
  std::unique_ptr<SampleCudaWorkspace> sample_;
  std::unique_ptr<TopKCudaWorkspace> top_k_;
  std::unique_ptr<SparseIndexCudaWorkspace> sparse_index_;  // the sparse index builders
  std::unique_ptr<GatherErrorWord> gather_error_;           // for GatherRows on the compute stream
  std::unique_ptr<CudaCopyQueue> copies_;
  std::vector<void*> weights_;
  void* attention_scratch_ = nullptr;  // attention's split partials, on stream_ only
  size_t attention_scratch_bytes_ = 0;
  bool capturing_ = false;
  uint64_t memory_epoch_ = 0;
};

}  // namespace

StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device) {
  return CudaBackend::Create(device);
}

}  // namespace millipede
