#include "worker/backend/cuda_copy_queue.h"

#include <memory>

#include "common/cuda_check.h"
#include "common/parallel_copy.h"
#include "kernels/memory/gather_rows_cuda.h"

namespace millipede {
namespace {

// Blocks of a gather on the copy queue. Its rows come from host memory across PCIe: 64 blocks
// keep ~1 MiB of reads in flight, several times what the link needs, while taking a few percent
// of the SMs' thread slots from the compute the gather overlaps (an uncapped grid of thousands of
// blocks waiting on PCIe would crowd it out).
constexpr int64_t kCopyGatherBlocks = 64;

// Asynchronous copies from or to pageable memory are staged and synchronous for the host, which
// would silently undo the overlap; such memory is refused. Returns where `p` lives.
StatusOr<cudaMemoryType> CheckNotPageable(const void* p, const char* what) {
  if (p == nullptr) return cudaMemoryTypeUnregistered;
  cudaPointerAttributes attributes{};
  MP_CUDA_CHECK(cudaPointerGetAttributes(&attributes, p));
  MP_REQUIRE(attributes.type != cudaMemoryTypeUnregistered, "StartCopy: ", what,
             " is pageable host memory; asynchronous copies need AllocateHost memory");
  return attributes.type;
}

// A copy between two buffers of page-locked host memory, run by the copy stream as a host
// function: the copy engine moves host-to-host copies at a fraction of the host's memory
// bandwidth, several host threads at most of it (the host tier's rows of a cached document).
struct HostCopy {
  void* dst;
  const void* src;
  size_t bytes;
};
void RunHostCopy(void* data) {
  const std::unique_ptr<HostCopy> copy(static_cast<HostCopy*>(data));
  ParallelCopy(copy->dst, copy->src, copy->bytes);
}

}  // namespace

StatusOr<std::unique_ptr<GatherErrorWord>> GatherErrorWord::Create() {
  auto w = std::unique_ptr<GatherErrorWord>(new GatherErrorWord());
  void* p = nullptr;
  MP_CUDA_CHECK(cudaHostAlloc(&p, sizeof(int64_t), cudaHostAllocMapped));
  w->word_ = static_cast<int64_t*>(p);
  *w->word_ = -1;
  return w;
}

GatherErrorWord::~GatherErrorWord() {
  if (word_ != nullptr) cudaFreeHost(word_);
}

Status GatherErrorWord::Take(const char* where) {
  // volatile: the device writes the word behind the compiler's back.
  volatile int64_t* word = word_;
  const int64_t position = *word;
  if (position == -1) return OkStatus();
  *word = -1;
  return OutOfRangeError(detail::StrCat(where, ": a row gather met an out-of-range index (entry ",
                                        position, "); that row was written as zeros"));
}

StatusOr<std::unique_ptr<CudaCopyQueue>> CudaCopyQueue::Create(cudaStream_t compute) {
  auto q = std::unique_ptr<CudaCopyQueue>(new CudaCopyQueue());
  q->compute_ = compute;
  MP_CUDA_CHECK(cudaStreamCreateWithFlags(&q->copy_, cudaStreamNonBlocking));
  MP_CUDA_CHECK(cudaEventCreateWithFlags(&q->compute_marker_, cudaEventDisableTiming));
  MP_ASSIGN_OR_RETURN(q->gather_error_, GatherErrorWord::Create());
  return q;
}

CudaCopyQueue::~CudaCopyQueue() {
  if (copy_ != nullptr) cudaStreamSynchronize(copy_);
  for (auto& [sequence, event] : pending_) cudaEventDestroy(event);
  for (cudaEvent_t event : free_events_) cudaEventDestroy(event);
  if (compute_marker_ != nullptr) cudaEventDestroy(compute_marker_);
  if (copy_ != nullptr) cudaStreamDestroy(copy_);
}

Status CudaCopyQueue::Begin(CopyOrder order) {
  if (order == CopyOrder::kNow) return OkStatus();
  // The wait takes the marker's state at this call, so re-recording it for the next copy is safe.
  MP_CUDA_CHECK(cudaEventRecord(compute_marker_, compute_));
  MP_CUDA_CHECK(cudaStreamWaitEvent(copy_, compute_marker_, 0));
  return OkStatus();
}

StatusOr<CopyEvent> CudaCopyQueue::Finish() {
  MP_RETURN_IF_ERROR(Retire(0));
  cudaEvent_t event = nullptr;
  if (free_events_.empty()) {
    MP_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  } else {
    event = free_events_.back();
    free_events_.pop_back();
  }
  const cudaError_t recorded = cudaEventRecord(event, copy_);
  if (recorded != cudaSuccess) free_events_.push_back(event);
  MP_CUDA_CHECK(recorded);
  pending_.emplace_back(++issued_, event);
  return CopyEvent{issued_};
}

Status CudaCopyQueue::Retire(uint64_t known_complete) {
  while (!pending_.empty()) {
    const auto [sequence, event] = pending_.front();
    if (sequence > known_complete) {
      const cudaError_t state = cudaEventQuery(event);
      if (state == cudaErrorNotReady) break;
      MP_CUDA_CHECK(state);
    }
    pending_.pop_front();
    free_events_.push_back(event);
    completed_ = sequence;
  }
  return OkStatus();
}

StatusOr<cudaEvent_t> CudaCopyQueue::Pending(uint64_t sequence) const {
  // pending_ holds consecutive sequences, oldest first.
  MP_ASSERT(!pending_.empty() && sequence >= pending_.front().first &&
                sequence - pending_.front().first < pending_.size(),
            "copy ", sequence, " is neither complete nor pending");
  return pending_[sequence - pending_.front().first].second;
}

Status CudaCopyQueue::CheckIssued(CopyEvent event) const {
  MP_REQUIRE(event.sequence <= issued_, "copy event ", event.sequence,
             " was not issued by this backend (", issued_, " copies so far)");
  return OkStatus();
}

StatusOr<CopyEvent> CudaCopyQueue::Copy(ConstTensorView src, TensorView dst, CopyOrder order) {
  MP_REQUIRE(src.dtype == dst.dtype, "StartCopy: dtype ", DTypeName(src.dtype), " vs ",
             DTypeName(dst.dtype));
  MP_REQUIRE(src.NumElements() == dst.NumElements(), "StartCopy: element counts differ (",
             src.shape.ToString(), " vs ", dst.shape.ToString(), ")");
  MP_ASSIGN_OR_RETURN(const cudaMemoryType from, CheckNotPageable(src.data, "src"));
  MP_ASSIGN_OR_RETURN(const cudaMemoryType to, CheckNotPageable(dst.data, "dst"));
  MP_RETURN_IF_ERROR(Begin(order));
  const size_t n = src.NumBytes();
  const auto* s = static_cast<const char*>(src.data);
  const auto* d = static_cast<const char*>(dst.data);
  const bool apart = s + n <= d || d + n <= s;
  if (n >= kParallelCopyMinBytes && from == cudaMemoryTypeHost && to == cudaMemoryTypeHost &&
      apart) {
    auto copy = std::make_unique<HostCopy>(HostCopy{dst.data, src.data, n});
    MP_CUDA_CHECK(cudaLaunchHostFunc(copy_, RunHostCopy, copy.get()));
    copy.release();  // RunHostCopy owns it now
  } else if (n > 0) {
    MP_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, n, cudaMemcpyDefault, copy_));
  }
  return Finish();
}

StatusOr<CopyEvent> CudaCopyQueue::Gather(const GatherRowsArgs& args, CopyOrder order) {
  MP_RETURN_IF_ERROR(GatherRowsCheckArgs(args));
  MP_RETURN_IF_ERROR(Begin(order));
  MP_RETURN_IF_ERROR(GatherRowsCuda(args, gather_error_->device(), copy_, kCopyGatherBlocks));
  return Finish();
}

Status CudaCopyQueue::ComputeWaitFor(CopyEvent event) {
  MP_RETURN_IF_ERROR(CheckIssued(event));
  if (event.sequence <= completed_) return OkStatus();
  MP_ASSIGN_OR_RETURN(cudaEvent_t pending, Pending(event.sequence));
  MP_CUDA_CHECK(cudaStreamWaitEvent(compute_, pending, 0));
  return OkStatus();
}

Status CudaCopyQueue::Wait(CopyEvent event) {
  MP_RETURN_IF_ERROR(CheckIssued(event));
  if (event.sequence > completed_) {
    MP_ASSIGN_OR_RETURN(cudaEvent_t pending, Pending(event.sequence));
    MP_CUDA_CHECK(cudaEventSynchronize(pending));
    MP_RETURN_IF_ERROR(Retire(event.sequence));
  }
  return gather_error_->Take("copy queue");
}

StatusOr<bool> CudaCopyQueue::Done(CopyEvent event) {
  MP_RETURN_IF_ERROR(CheckIssued(event));
  MP_RETURN_IF_ERROR(Retire(0));
  if (event.sequence > completed_) return false;
  MP_RETURN_IF_ERROR(gather_error_->Take("copy queue"));
  return true;
}

}  // namespace millipede
