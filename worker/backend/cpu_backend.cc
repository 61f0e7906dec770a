#include "worker/backend/cpu_backend.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>

#include "kernels/cpu/attention_cpu.h"
#include "kernels/cpu/attention_fp8_cpu.h"
#include "kernels/cpu/convert_cpu.h"
#include "kernels/cpu/embedding_cpu.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/cpu/merge_state_cpu.h"
#include "kernels/cpu/rms_norm_cpu.h"
#include "kernels/cpu/rope_cpu.h"
#include "kernels/cpu/rope_kv_cpu.h"
#include "kernels/cpu/silu_mul_cpu.h"
#include "kernels/cpu/sparse_attention_cpu.h"
#include "worker/backend/cpu_copy_queue.h"
#include "worker/backend/host_paged_memory.h"

namespace millipede {
namespace {

Status CheckSameSize(ConstTensorView a, ConstTensorView b, const char* what) {
  MP_REQUIRE(a.NumElements() == b.NumElements(), what, ": element counts differ (",
             a.shape.ToString(), " vs ", b.shape.ToString(), ")");
  return OkStatus();
}


class CpuBackend final : public Backend {
 public:
  BackendKind kind() const override { return BackendKind::kCpu; }

  StatusOr<BackendTensor> Allocate(DType dtype, const Shape& shape) override {
    MP_ASSIGN_OR_RETURN(size_t bytes, CheckedNumBytes(shape, dtype));
    MP_REQUIRE(bytes <= (size_t{1} << 60), "tensor of ", bytes, " bytes is too large");
    // 64-byte alignment for vector loads; size rounded up as aligned_alloc requires.
    void* p = std::aligned_alloc(64, std::max<size_t>(64, (bytes + 63) / 64 * 64));
    if (p == nullptr)
      return ResourceExhaustedError("cannot allocate " + std::to_string(bytes) +
                                    " bytes of host memory for a tensor " + shape.ToString());
    return BackendTensor(TensorView{p, dtype, shape}, [](void* q) { std::free(q); });
  }
  int64_t page_bytes() const override { return HostPageBytes(); }
  StatusOr<BackendTensor> AllocatePaged(DType dtype, const Shape& shape, int64_t chunk_bytes,
                                        const BackendTensor* share, int64_t share_chunks) override {
    return AllocatePagedHost(dtype, shape, chunk_bytes, share, share_chunks);
  }

  StatusOr<std::vector<ConstTensorView>> AdoptWeights(
      std::span<const ConstTensorView> hosts) override {
    return std::vector<ConstTensorView>(hosts.begin(), hosts.end());
  }

  Status CopyFromHost(ConstTensorView host_src, TensorView dst) override {
    return Copy(host_src, dst);
  }
  Status CopyToHost(ConstTensorView src, TensorView host_dst) override {
    return Copy(src, host_dst);
  }
  Status Convert(ConstTensorView src, TensorView dst) override { return ConvertCpu(src, dst); }
  Status Synchronize() override { return OkStatus(); }
  StatusOr<BackendMemory> Memory() override { return HostMemory(); }
  DType GemmInputDType(DType) const override { return DType::kF32; }

  // The ops run the fast kernels of kernels/cpu/ (checked against the references there).
  Status Embedding(const EmbeddingArgs& args) override { return EmbeddingCpu(args); }
  Status RmsNorm(const RmsNormArgs& args) override { return RmsNormCpu(args); }
  Status Rope(const RopeArgs& args) override { return RopeCpu(args); }
  Status RopeKv(const RopeKvArgs& args) override { return RopeKvCpu(args); }
  Status Gemm(const GemmArgs& args) override { return GemmCpu(args); }
  // A few rows of a few parts: the reference is fast enough.
  Status AddParts(const AddPartsArgs& args) override { return AddPartsRef(args); }
  Status SiluMul(const SiluMulArgs& args) override { return SiluMulCpu(args); }
  Status Attention(const AttentionArgs& args) override { return AttentionCpu(args); }
  Status AttentionFp8(const AttentionArgs& args) override { return AttentionFp8Cpu(args); }
  Status BatchDecodeAttention(const BatchDecodeAttentionArgs& args) override {
    MP_RETURN_IF_ERROR(BatchDecodeAttentionCheckArgs(args));
    BatchDecodeGathered gathered;
    for (int64_t b = 0; b < BatchDecodeEntries(args); ++b) {
      MP_ASSIGN_OR_RETURN(const AttentionArgs one, BatchDecodeEntryArgsOnHost(args, b, &gathered));
      MP_RETURN_IF_ERROR(AttentionCpu(one));
    }
    return OkStatus();
  }
  Status SparseAttention(const SparseAttentionArgs& args) override {
    return SparseAttentionCpu(args);
  }
  Status SparseIndexPairs(const SparseIndexPairsArgs& args) override {
    return SparseIndexPairsRef(args);
  }
  Status MergeState(const MergeStateArgs& args) override { return MergeStateCpu(args); }
  Status MergeStateInPlace(TensorView o, TensorView lse, ConstTensorView o_other,
                           ConstTensorView lse_other) override {
    return MergeStateInPlaceCpu(o, lse, o_other, lse_other);
  }
  Status ClearState(TensorView o, TensorView lse) override {
    MP_REQUIRE(o.dtype == DType::kF32 && lse.dtype == DType::kF32, "ClearState: F32 expected");
    std::fill_n(o.as<float>(), o.NumElements(), 0.0f);
    std::fill_n(lse.as<float>(), lse.NumElements(), -std::numeric_limits<float>::infinity());
    return OkStatus();
  }
  StatusOr<int32_t> Sample(ConstTensorView logits, const SamplingParams& params,
                           uint64_t step) override {
    return SampleRef(logits, params, step);
  }
  Status SamplingPenalties(const SamplingPenaltiesArgs& args) override {
    return SamplingPenaltiesRef(args);
  }
  Status SamplingLogprobs(const SamplingLogprobsArgs& args) override {
    return SamplingLogprobsRef(args);
  }

  // Selection ops, host memory and the copy queue (see backend.h): everything is host memory,
  // so copies run at once.
  Status TopK(const TopKArgs& args) override { return TopKRef(args); }
  Status TopKKeys(const TopKKeysArgs& args) override { return TopKKeysRef(args); }
  Status TopKCut(const TopKCutArgs& args) override { return TopKCutRef(args); }
  Status KeyScores(const KeyScoresArgs& args) override { return KeyScoresRef(args); }
  Status TokenScores(const TokenScoresArgs& args) override { return TokenScoresRef(args); }
  Status BatchTokenScores(const BatchTokenScoresArgs& args) override {
    return BatchTokenScoresRef(args);
  }
  Status SelectionIndex(const SelectionIndexArgs& args) override {
    return SelectionIndexRef(args);
  }
  Status GatherRows(const GatherRowsArgs& args) override { return GatherRowsRef(args); }
  Status CopyHeads(const CopyHeadsArgs& args) override { return CopyHeadsRef(args); }
  Status VerticalSlashIndex(const VerticalSlashIndexArgs& args) override {
    return VerticalSlashIndexRef(args);
  }
  Status BlockSums(const BlockSumsArgs& args) override { return BlockSumsRef(args); }
  Status BlockSparseIndex(const BlockSparseIndexArgs& args) override {
    return BlockSparseIndexRef(args);
  }
  Status AntidiagonalSelect(const AntidiagonalSelectArgs& args) override {
    return AntidiagonalSelectRef(args);
  }
  Status BlockMaskIndex(const BlockMaskIndexArgs& args) override { return BlockMaskIndexRef(args); }
  StatusOr<BackendTensor> AllocateHost(DType dtype, const Shape& shape) override {
    return Allocate(dtype, shape);
  }
  StatusOr<CopyEvent> StartCopy(ConstTensorView src, TensorView dst, CopyOrder) override {
    return copies_.Copy(src, dst);
  }
  StatusOr<CopyEvent> StartGatherRows(const GatherRowsArgs& args, CopyOrder) override {
    return copies_.Gather(args);
  }
  Status ComputeWaitFor(CopyEvent event) override { return copies_.Check(event); }
  Status WaitCopy(CopyEvent event) override { return copies_.Check(event); }
  StatusOr<bool> CopyDone(CopyEvent event) override {
    MP_RETURN_IF_ERROR(copies_.Check(event));
    return true;
  }

 private:
  CpuCopyQueue copies_;

  static Status Copy(ConstTensorView src, TensorView dst) {
    MP_REQUIRE(src.dtype == dst.dtype, "copy: dtype ", DTypeName(src.dtype), " vs ",
               DTypeName(dst.dtype));
    MP_RETURN_IF_ERROR(CheckSameSize(src, AsConst(dst), "copy"));
    if (src.NumBytes() > 0) std::memmove(dst.data, src.data, src.NumBytes());
    return OkStatus();
  }
};

}  // namespace

// MemAvailable / MemTotal from /proc/meminfo.
StatusOr<BackendMemory> HostMemory() {
  std::ifstream in("/proc/meminfo");
  BackendMemory m;
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemAvailable:") m.free_bytes = kib * 1024;
    if (key == "MemTotal:") m.total_bytes = kib * 1024;
  }
  if (m.total_bytes <= 0) {
    const long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES);
    const long page = sysconf(_SC_PAGE_SIZE);
    MP_REQUIRE(pages > 0 && page > 0, "cannot read the host's memory size");
    m.total_bytes = static_cast<int64_t>(pages) * page;
    m.free_bytes = static_cast<int64_t>(std::max(avail, 0L)) * page;
  }
  return m;
}

std::unique_ptr<Backend> CreateCpuBackend() { return std::make_unique<CpuBackend>(); }

}  // namespace millipede
