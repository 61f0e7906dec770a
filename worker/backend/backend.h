// Where the engine's tensors live and how its ops run: the CPU backend (the kernels' references)
// and, in CUDA builds, the GPU backend implement this interface.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "common/status.h"
#include "common/tensor.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/batch_decode_attention.h"
#include "kernels/attention/merge_state.h"
#include "kernels/attention/sparse_attention.h"
#include "kernels/layer/add_parts.h"
#include "kernels/layer/embedding.h"
#include "kernels/layer/gemm.h"
#include "kernels/layer/rms_norm.h"
#include "kernels/layer/rope.h"
#include "kernels/layer/rope_kv.h"
#include "kernels/layer/silu_mul.h"
#include "kernels/memory/convert.h"
#include "kernels/memory/copy_heads.h"
#include "kernels/memory/gather_rows.h"
#include "kernels/sampling/sampling.h"
#include "kernels/sampling/sampling_logprobs.h"
#include "kernels/sampling/sampling_penalties.h"
#include "kernels/selection/batch_token_scores.h"
#include "kernels/selection/key_scores.h"
#include "kernels/selection/selection_index.h"
#include "kernels/selection/token_scores.h"
#include "kernels/selection/top_k.h"
#include "kernels/selection/top_k_cut.h"
#include "kernels/selection/top_k_keys.h"
#include "kernels/sparse_index/antidiagonal_select.h"
#include "kernels/sparse_index/block_mask_index.h"
#include "kernels/sparse_index/block_sparse_index.h"
#include "kernels/sparse_index/block_sums.h"
#include "kernels/sparse_index/sparse_index_pairs.h"
#include "kernels/sparse_index/vertical_slash_index.h"

namespace millipede {

// Physical memory of a paged tensor (Backend::AllocatePaged), in chunks that several tensors may
// map at once: a chunk is freed once no tensor maps it. Backend-specific; `bytes` a multiple of
// Backend::page_bytes().
class MemoryChunk {
 public:
  virtual ~MemoryChunk() = default;
  int64_t bytes = 0;
};
// A paged tensor's chunks in address order (they cover its bytes, the last one rounded up).
// A chunk's use_count() is the number of paged tensors that map it.
struct PagedMemory {
  virtual ~PagedMemory() = default;
  std::vector<std::shared_ptr<const MemoryChunk>> chunks;
};

// A tensor owned by a backend (host or device memory); freed when destroyed. Move-only.
class BackendTensor {
 public:
  BackendTensor() = default;
  BackendTensor(TensorView view, std::function<void(void*)> release,
                std::shared_ptr<const PagedMemory> paged = nullptr)
      : view_(view), release_(std::move(release)), paged_(std::move(paged)) {}
  ~BackendTensor() { Reset(); }
  BackendTensor(BackendTensor&& other) noexcept { *this = std::move(other); }
  BackendTensor& operator=(BackendTensor&& other) noexcept {
    if (this != &other) {
      Reset();
      view_ = other.view_;
      release_ = std::move(other.release_);
      paged_ = std::move(other.paged_);
      other.view_ = TensorView{};
      other.release_ = nullptr;
    }
    return *this;
  }
  BackendTensor(const BackendTensor&) = delete;
  BackendTensor& operator=(const BackendTensor&) = delete;

  const TensorView& view() const { return view_; }
  ConstTensorView cview() const { return AsConst(view_); }
  // Bytes held: 0 while nothing is allocated (a default view describes one element).
  size_t NumBytes() const { return view_.data == nullptr ? 0 : view_.NumBytes(); }
  // The chunks of a paged tensor (Backend::AllocatePaged); null for any other.
  const PagedMemory* paged() const { return paged_.get(); }

 private:
  void Reset() {
    if (release_ && view_.data != nullptr) release_(view_.data);
    view_ = TensorView{};
    release_ = nullptr;
    paged_.reset();
  }
  TensorView view_;
  std::function<void(void*)> release_;
  std::shared_ptr<const PagedMemory> paged_;
};

enum class BackendKind { kCpu, kCuda };

// Ops recorded by Backend::EndCapture, for Backend::Replay (a CUDA graph on a GPU backend).
class RecordedOps {
 public:
  virtual ~RecordedOps() = default;
};

// Memory of the place a backend's tensors live (host RAM for the CPU backend, the GPU's memory).
struct BackendMemory {
  int64_t free_bytes = 0;   // what allocations can still get
  int64_t total_bytes = 0;
};
const char* BackendKindName(BackendKind kind);
StatusOr<BackendKind> ParseBackendKind(std::string_view name);

// A copy started on a backend's copy queue (Backend::StartCopy). The queue runs its copies one
// after another in the order started, so a copy is complete once any later one is.
struct CopyEvent {
  uint64_t sequence = 0;  // 1, 2, ... in the order started; 0: no copy (always complete)
};

// What a copy waits for before it starts.
enum class CopyOrder {
  // Every op queued on the compute stream so far (the copy sees their results): e.g. a layer's
  // K/V copied out after the layer wrote them, or rows gathered by indices computed on it.
  kAfterCompute,
  // Only the copies started before it (the queue runs in order): for buffers that no op still
  // queued on the compute stream writes (nor reads, for dst).
  kNow,
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual BackendKind kind() const = 0;

  // Uninitialised memory for a tensor.
  virtual StatusOr<BackendTensor> Allocate(DType dtype, const Shape& shape) = 0;
  // Uninitialised memory for scratch that only compute-queue ops use (and copies or collectives
  // the compute queue waits for before it is freed): attention strategies' buffers. A device
  // backend takes it from a stream-ordered pool, so that a finished sequence frees its scratch
  // without waiting for the device. By default Allocate.
  virtual StatusOr<BackendTensor> AllocateScratch(DType dtype, const Shape& shape) {
    return Allocate(dtype, shape);
  }
  // ---- Paged tensors: memory that tensors share (the prefix cache's shared KV blocks) ----
  // The unit of paged memory in bytes (the host's page, the GPU's mapping granularity); 0 when
  // the backend has no paged tensors.
  virtual int64_t page_bytes() const { return 0; }
  // A tensor in backend memory made of chunks of `chunk_bytes` (a multiple of page_bytes(); the
  // last chunk rounded up), laid out as Allocate's. With `share`, a paged tensor, its first
  // `share_chunks` chunks are mapped as this tensor's first ones rather than allocated: the
  // same memory, not a copy (a write to either is seen by both), freed once neither maps it;
  // the other chunks are new and uninitialised. Unimplemented where page_bytes() is 0.
  virtual StatusOr<BackendTensor> AllocatePaged(DType dtype, const Shape& shape,
                                                int64_t chunk_bytes,
                                                const BackendTensor* share = nullptr,
                                                int64_t share_chunks = 0) {
    return UnimplementedError("this backend has no paged memory");
  }
  // Makes host weights usable by the ops, one view per weight in order. The CPU backend returns
  // the host views themselves (zero copy: the caller keeps the memory alive); a device backend
  // copies them into one allocation it owns, back to back in the given order (each at a multiple
  // of its element size), so that weights of one dtype and width which one GEMM can take
  // together (a layer's q/k/v or gate/up projections) form one matrix there.
  virtual StatusOr<std::vector<ConstTensorView>> AdoptWeights(
      std::span<const ConstTensorView> hosts) = 0;
  // AdoptWeights of one weight.
  StatusOr<ConstTensorView> AdoptWeight(ConstTensorView host) {
    MP_ASSIGN_OR_RETURN(std::vector<ConstTensorView> adopted, AdoptWeights({&host, 1}));
    return adopted.at(0);
  }
  // Copies between host memory and backend memory (same dtype and element count).
  virtual Status CopyFromHost(ConstTensorView host_src, TensorView dst) = 0;
  virtual Status CopyToHost(ConstTensorView src, TensorView host_dst) = 0;
  // dst = src converted to dst's dtype (same element count), both in backend memory.
  virtual Status Convert(ConstTensorView src, TensorView dst) = 0;
  // Waits until every queued op has finished.
  virtual Status Synchronize() = 0;
  // Free and total memory now.
  virtual StatusOr<BackendMemory> Memory() = 0;

  // The dtype in which an op feeding a GEMM with `weight_dtype` weights (RMSNorm, SiLU-mul)
  // should write its output (GemmArgs::a). F32 on the CPU backend (exact fp32 activations); on a
  // GPU, whose GEMM rounds F32 activations to BF16/F16 weights' dtype with a conversion kernel of
  // its own, that dtype: the producer rounds as it writes, one kernel fewer for the same result.
  virtual DType GemmInputDType(DType weight_dtype) const = 0;

  // The model's ops; argument contracts are those of the kernels/ headers.
  virtual Status Embedding(const EmbeddingArgs& args) = 0;
  virtual Status RmsNorm(const RmsNormArgs& args) = 0;
  virtual Status Rope(const RopeArgs& args) = 0;
  virtual Status RopeKv(const RopeKvArgs& args) = 0;
  virtual Status Gemm(const GemmArgs& args) = 0;
  virtual Status SiluMul(const SiluMulArgs& args) = 0;
  // Gathered partial products summed in order into a residual (decode's MLP split over ranks).
  virtual Status AddParts(const AddPartsArgs& args) = 0;
  virtual Status Attention(const AttentionArgs& args) = 0;
  // FP8 attention (kernels/attention/attention_fp8.h), a policy's opt-in precision for dense
  // heads in prefill: AttentionFp8Ref's computation (the CPU backend exactly, over threads; the
  // CUDA backend on Hopper's FP8 MMAs, Unimplemented on other GPUs and head dims).
  virtual Status AttentionFp8(const AttentionArgs& args) = 0;
  // One decode token of each of several sequences against its own K/V, in one call (the decode
  // tokens of a continuous-batching step).
  virtual Status BatchDecodeAttention(const BatchDecodeAttentionArgs& args) = 0;
  // Attention over a sparse index (kernels/attention/sparse_attention.h), tiles and index in
  // backend memory. The CPU backend checks the index's contents (SparseAttentionCheckData); a GPU
  // cannot without waiting for them and trusts them (the index ops build valid ones), but never
  // reads a key row outside k.
  virtual Status SparseAttention(const SparseAttentionArgs& args) = 0;
  // Adds the causal query-key pairs a sparse index covers to a count in backend memory
  // (kernels/sparse_index/sparse_index_pairs.h); the CPU backend checks the offsets, a GPU trusts
  // them as SparseAttention does.
  virtual Status SparseIndexPairs(const SparseIndexPairsArgs& args) = 0;
  virtual Status MergeState(const MergeStateArgs& args) = 0;
  // (o, lse) becomes the merge of itself with (o_other, lse_other); see kernels/merge_state.h.
  virtual Status MergeStateInPlace(TensorView o, TensorView lse, ConstTensorView o_other,
                                   ConstTensorView lse_other) = 0;
  // Sets o = 0 and lse = -inf: the state of attention over no keys.
  virtual Status ClearState(TensorView o, TensorView lse) = 0;
  // Samples from logits held in backend memory (temperature, top-k, top-p, min-p; the bias and
  // penalties are SamplingPenalties, run before: worker/token_sampler.h puts them together).
  virtual StatusOr<int32_t> Sample(ConstTensorView logits, const SamplingParams& params,
                                   uint64_t step) = 0;
  virtual Status SamplingPenalties(const SamplingPenaltiesArgs& args) = 0;
  virtual Status SamplingLogprobs(const SamplingLogprobsArgs& args) = 0;

  // Selection ops: per-row top-k, key scores for static eviction, token scores and the gather
  // index of OmniKV's filter layers, row gathers. Argument contracts are those of
  // kernels/selection/top_k.h, kernels/selection/key_scores.h, kernels/selection/token_scores.h,
  // kernels/selection/selection_index.h and kernels/memory/gather_rows.h, with every tensor in backend
  // memory (a gather's src may also be AllocateHost memory). An out-of-range gather index is an
  // OutOfRange error: at once on the CPU backend; on a GPU, which cannot see the indices without
  // waiting, the row is written as zeros and the error comes from the next Synchronize(). A GPU
  // trusts SelectionIndex's chosen rows likewise (the CPU backend checks them).
  virtual Status TopK(const TopKArgs& args) = 0;
  // A top-k over several ranks without the host (kernels/selection/top_k_keys.h, kernels/selection/top_k_cut.h):
  // each rank's TopK as keys, all-gathered, then cut. A GPU trusts the columns and keys.
  virtual Status TopKKeys(const TopKKeysArgs& args) = 0;
  virtual Status TopKCut(const TopKCutArgs& args) = 0;
  virtual Status KeyScores(const KeyScoresArgs& args) = 0;
  virtual Status TokenScores(const TokenScoresArgs& args) = 0;
  // TokenScores of many decode tokens into one NaN-padded matrix
  // (kernels/selection/batch_token_scores.h): the filter layers of a batch, cut by one TopK.
  virtual Status BatchTokenScores(const BatchTokenScoresArgs& args) = 0;
  virtual Status SelectionIndex(const SelectionIndexArgs& args) = 0;
  virtual Status GatherRows(const GatherRowsArgs& args) = 0;
  // Whole heads between two tensors of per-head rows (kernels/memory/copy_heads.h), both in backend
  // memory: the packs of a layer whose KV heads live in separate stores.
  virtual Status CopyHeads(const CopyHeadsArgs& args) = 0;

  // Sparse attention indices (kernels/sparse_index/vertical_slash_index.h, block_sums.h,
  // block_sparse_index.h, antidiagonal_select.h and block_mask_index.h), every tensor in backend
  // memory except the per-head arrays (top_blocks, permille, heads: host). An index is built in two
  // calls, the count pass then the fill pass; both return once the offsets are written and the
  // inputs checked (on a GPU they wait for the stream), so the caller may read the offsets' last
  // entries to size the fill pass's outputs.
  virtual Status VerticalSlashIndex(const VerticalSlashIndexArgs& args) = 0;
  virtual Status BlockSums(const BlockSumsArgs& args) = 0;
  virtual Status BlockSparseIndex(const BlockSparseIndexArgs& args) = 0;
  virtual Status AntidiagonalSelect(const AntidiagonalSelectArgs& args) = 0;
  virtual Status BlockMaskIndex(const BlockMaskIndexArgs& args) = 0;

  // Host memory for asynchronous copies and for ops to read directly (a host KV tier):
  // page-locked and mapped into the GPU's address space on a GPU backend, plain aligned memory on
  // the CPU backend. The view's data is a host pointer either way. Uninitialised. Callable from
  // any thread (the disk tier reads entries on one of its own).
  virtual StatusOr<BackendTensor> AllocateHost(DType dtype, const Shape& shape) = 0;

  // The copy queue: copies on a stream of their own, beside the compute stream. On the CPU
  // backend every copy runs at once and returns a complete event.
  //
  // StartCopy queues dst = src (same dtype and element count; each side backend memory or
  // AllocateHost memory, pageable host memory is refused) after what `order` names, and returns
  // at once. Until the copy is complete, src must not be written and dst not read or written:
  // compute that would touches them only after ComputeWaitFor(event), the host only after
  // WaitCopy(event) or CopyDone(event) said so, and neither buffer is freed before. So a layer's
  // K/V goes to host memory behind the next layer's compute (kAfterCompute, then ComputeWaitFor
  // before the buffer is overwritten), and rows go host -> device while compute runs.
  virtual StatusOr<CopyEvent> StartCopy(ConstTensorView src, TensorView dst, CopyOrder order) = 0;
  // GatherRows as a copy: queued on the copy queue with StartCopy's ordering and buffer rules
  // (args.src typically AllocateHost memory, args.index and args.dst backend memory). An
  // out-of-range index writes a zero row there; the OutOfRange error comes, at the latest, from
  // the first WaitCopy or CopyDone that finds this gather complete.
  virtual StatusOr<CopyEvent> StartGatherRows(const GatherRowsArgs& args, CopyOrder order) = 0;
  // Ops queued on the compute stream from now on start after `event`'s copy is complete (the
  // host does not wait).
  virtual Status ComputeWaitFor(CopyEvent event) = 0;
  // Blocks the host until `event`'s copy is complete.
  virtual Status WaitCopy(CopyEvent event) = 0;
  // Whether `event`'s copy is complete, without blocking.
  virtual StatusOr<bool> CopyDone(CopyEvent event) = 0;

  // ---- Recording (decode graphs) ----
  // Ops queued between BeginCapture and EndCapture are recorded, not run; Replay runs the
  // recording on the compute stream: the same ops with the same arguments (tensor addresses and
  // shapes as recorded, their contents as they are at replay time). Nothing recorded may wait for
  // the device, copy from pageable host memory or allocate. A backend that cannot record refuses
  // BeginCapture with Unimplemented. After a failed op, EndCapture still ends the recording.
  virtual Status BeginCapture() { return UnimplementedError("this backend does not record ops"); }
  virtual StatusOr<std::unique_ptr<RecordedOps>> EndCapture() {
    return UnimplementedError("this backend does not record ops");
  }
  virtual Status Replay(const RecordedOps& ops) {
    return UnimplementedError("this backend does not record ops");
  }
  // Changes whenever the backend moves memory its ops use on their own (the attention ops' split
  // partials, top-k's and the GEMMs' scratch): recordings made before are stale.
  virtual uint64_t memory_epoch() const { return 0; }
  // Whether BatchDecodeAttention takes per-sequence lengths and row indices
  // (BatchDecodeAttentionArgs::lengths, kv_row_index) for K/V of this head_dim, these query heads
  // per KV head and this dtype.
  virtual bool DecodeTakesLengths(int64_t head_dim, int64_t group, DType kv_dtype) const {
    return true;
  }
  // Whether AttentionFp8 runs for this head_dim on this backend.
  virtual bool RunsFp8Attention(int64_t head_dim) const { return true; }
};

// For backends implementing AllocatePaged: a paged tensor of `bytes` is share's first
// `share_chunks` chunks (`shared`), then new chunks (`new_bytes`, each chunk_bytes, the last
// rounded up to `page`), `total` bytes in all. InvalidArgument for a chunk size not a positive
// multiple of the page, a `share` not paged or with fewer chunks, or shared chunks beyond `bytes`.
struct PagedPlan {
  std::vector<std::shared_ptr<const MemoryChunk>> shared;
  std::vector<int64_t> new_bytes;
  int64_t total = 0;
};
StatusOr<PagedPlan> PlanPaged(int64_t bytes, int64_t page, int64_t chunk_bytes,
                              const BackendTensor* share, int64_t share_chunks);

// The host's memory (MemAvailable: what the kernel can give without swapping): where the CPU
// backend's tensors and every backend's AllocateHost memory (a host KV tier) live.
StatusOr<BackendMemory> HostMemory();

}  // namespace millipede
