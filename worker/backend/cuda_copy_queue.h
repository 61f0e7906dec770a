// The CUDA backend's copy queue: a non-blocking stream of its own beside the compute stream, a
// pool of events (one per copy in flight) and the error word of the gathers it runs. CUDA builds
// only; the Backend interface (worker/backend/backend.h) stays CUDA-free.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "worker/backend/backend.h"

namespace millipede {

// Where GatherRowsCuda reports an out-of-range index (kernels/memory/gather_rows_cuda.h): one int64 of
// mapped page-locked memory, so the host reads it without a copy once the stream is past the
// gathers. -1 when nothing was reported.
class GatherErrorWord {
 public:
  static StatusOr<std::unique_ptr<GatherErrorWord>> Create();
  ~GatherErrorWord();
  GatherErrorWord(const GatherErrorWord&) = delete;
  GatherErrorWord& operator=(const GatherErrorWord&) = delete;

  int64_t* device() const { return word_; }
  // OutOfRange naming `where` when a gather reported an index, which is then cleared; OK
  // otherwise. Call once the gathers in question have completed.
  Status Take(const char* where);

 private:
  GatherErrorWord() = default;
  int64_t* word_ = nullptr;
};

class CudaCopyQueue {
 public:
  // `compute` is the stream the backend's ops run on (the current device's).
  static StatusOr<std::unique_ptr<CudaCopyQueue>> Create(cudaStream_t compute);
  // Waits for the copies in flight, then frees the stream and the events.
  ~CudaCopyQueue();
  CudaCopyQueue(const CudaCopyQueue&) = delete;
  CudaCopyQueue& operator=(const CudaCopyQueue&) = delete;

  // Backend::StartCopy, StartGatherRows, ComputeWaitFor, WaitCopy and CopyDone.
  StatusOr<CopyEvent> Copy(ConstTensorView src, TensorView dst, CopyOrder order);
  StatusOr<CopyEvent> Gather(const GatherRowsArgs& args, CopyOrder order);
  Status ComputeWaitFor(CopyEvent event);
  Status Wait(CopyEvent event);
  StatusOr<bool> Done(CopyEvent event);

 private:
  CudaCopyQueue() = default;
  // Makes the copy stream wait for what `order` names.
  Status Begin(CopyOrder order);
  // Records the event of the copy just queued.
  StatusOr<CopyEvent> Finish();
  // Drops the events of completed copies (oldest first), up to `sequence` when it is known
  // complete, and then any further ones that have completed.
  Status Retire(uint64_t known_complete);
  // The event of a copy not yet known complete.
  StatusOr<cudaEvent_t> Pending(uint64_t sequence) const;
  Status CheckIssued(CopyEvent event) const;

  cudaStream_t compute_ = nullptr;
  cudaStream_t copy_ = nullptr;
  cudaEvent_t compute_marker_ = nullptr;  // re-recorded on the compute stream for each copy
  std::deque<std::pair<uint64_t, cudaEvent_t>> pending_;  // copies in flight, oldest first
  std::vector<cudaEvent_t> free_events_;
  uint64_t issued_ = 0;
  uint64_t completed_ = 0;                         // every copy up to this one is complete
  std::unique_ptr<GatherErrorWord> gather_error_;  // for the gathers on this queue
};

}  // namespace millipede
