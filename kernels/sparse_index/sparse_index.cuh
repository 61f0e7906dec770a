// Internals shared by the sparse index builders' kernels: the error word, key layout lookups on
// the device, warp scans, and the host steps every builder runs (input checks, the offsets
// scan, waiting for the stream and turning a reported error into a Status). Include only from
// .cu files.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"
#include "kernels/cuda_util.cuh"
#include "kernels/sparse_index/sparse_index.h"
#include "kernels/sparse_index/sparse_index_cuda.h"

namespace millipede::sparse_index_cuda {

inline constexpr unsigned kFullMask = 0xffffffffu;

// What a kernel found wrong; values[] say where (see FormatError in sparse_index.cu).
enum ErrorCode : int32_t {
  kNoError = 0,
  kBadTile,           // tile, row_begin, row_end, pos_begin
  kBadRun,            // run, pos_begin, pos_end, row_begin
  kBadSelection,      // head, 0 columns / 1 diagonals, slot, value
  kAbsentPosition,    // head, tile, position
  kSizeMismatch,      // 0 ranges / 1 columns, buffer rows, index rows
  kTileCrossesBlock,  // tile, pos_begin, block
  kTileBeyondBlocks,  // tile, query block, num_blocks
  kEmptyQueryBlock,   // tile, query block
  kRowsNotCovered,    // first row counted wrongly, total rows covered, rows
  kPositionBeyond,    // position, block, num_blocks
  kAbsentKey,         // position
};

struct ErrorWord {
  int32_t code;
  int32_t unused;
  int64_t values[4];
};

// The first report wins; later ones are dropped.
__device__ inline void Report(ErrorWord* error, int32_t code, int64_t a, int64_t b = 0,
                              int64_t c = 0, int64_t d = 0) {
  if (atomicCAS(&error->code, 0, code) != 0) return;
  error->values[0] = a;
  error->values[1] = b;
  error->values[2] = c;
  error->values[3] = d;
}

// Index of the first run whose pos_end > pos (n_runs if none); runs sorted and disjoint, so
// pos_end is non-decreasing.
__device__ inline int64_t FirstRunEndingAfter(const int64_t* runs, int64_t n_runs, int64_t pos) {
  int64_t lo = 0, hi = n_runs;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (runs[3 * mid + 1] > pos) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

// The key buffer row of `pos`, or -1 if no run holds it.
__device__ inline int64_t RowOf(const int64_t* runs, int64_t n_runs, int64_t pos) {
  const int64_t i = FirstRunEndingAfter(runs, n_runs, pos);
  if (i == n_runs || runs[3 * i] > pos) return -1;
  return runs[3 * i + 2] + (pos - runs[3 * i]);
}

// Calls emit(row_begin, row_end, pos_begin) for the pieces of positions [begin, end), one per
// run, in position order. An absent position is skipped with skip_absent; otherwise PlaceRange
// stops there, returns false and sets *absent to it.
template <typename Emit>
__device__ bool PlaceRange(const int64_t* runs, int64_t n_runs, int64_t begin, int64_t end,
                           bool skip_absent, int64_t* absent, Emit&& emit) {
  for (int64_t i = FirstRunEndingAfter(runs, n_runs, begin); begin < end; ++i) {
    if (i == n_runs || runs[3 * i] > begin) {
      if (!skip_absent) {
        *absent = begin;
        return false;
      }
      if (i == n_runs || runs[3 * i] >= end) return true;
      begin = runs[3 * i];
    }
    const int64_t piece_end = min(end, runs[3 * i + 1]);
    if (piece_end > begin) {
      const int64_t row = runs[3 * i + 2] + (begin - runs[3 * i]);
      emit(row, row + (piece_end - begin), begin);
    }
    begin = piece_end;
  }
  return true;
}

// Inclusive sum over the warp's lanes (all 32 active).
__device__ inline int64_t WarpInclusiveSum(int64_t v) {
  const int lane = threadIdx.x & 31;
  for (int offset = 1; offset < 32; offset *= 2) {
    const int64_t other = __shfl_up_sync(kFullMask, v, offset);
    if (lane >= offset) v += other;
  }
  return v;
}

// Number of entries of sorted a[0, n) that are <= x, and < x.
__device__ inline int64_t UpperBound(const int64_t* a, int64_t n, int64_t x) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (a[mid] <= x) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}
__device__ inline int64_t LowerBound(const int64_t* a, int64_t n, int64_t x) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (a[mid] < x) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// A builder call's arguments as a fill pass compares them with the count pass before it: a tag
// naming the builder, then the pointers, dtypes and shapes of the tensors and the scalars, in the
// order the builder adds them. Not the data, which cannot be compared cheaply on the device: the
// caller vouches for it (BlockSparseIndexArgs::inputs_unchanged_since_count).
class CallFingerprint {
 public:
  CallFingerprint& Add(int64_t value) {
    values_.push_back(value);
    return *this;
  }
  template <typename Ptr>
  CallFingerprint& Add(const BasicTensorView<Ptr>& t) {
    Add(static_cast<int64_t>(reinterpret_cast<uintptr_t>(t.data)));
    Add(static_cast<int64_t>(t.dtype)).Add(t.shape.rank);
    for (int i = 0; i < t.shape.rank; ++i) Add(t.shape.dims[i]);
    return *this;
  }
  bool empty() const { return values_.empty(); }
  bool operator==(const CallFingerprint& other) const { return values_ == other.values_; }

 private:
  std::vector<int64_t> values_;
};

}  // namespace millipede::sparse_index_cuda

namespace millipede {

struct SparseIndexCudaWorkspace::Impl {
  sparse_index_cuda::ErrorWord* error = nullptr;       // device
  sparse_index_cuda::ErrorWord* host_error = nullptr;  // page-locked
  cuda_util::DeviceScratch scan;                       // CUB's temporaries
  cuda_util::DeviceScratch heads;                      // per-head lengths and budgets
  cuda_util::DeviceScratch scores;                     // block-sparse scores (or keys)
  cuda_util::DeviceScratch kept;                       // block-sparse kept-block bitmaps
  cuda_util::DeviceScratch positions;                  // position-to-row tables
  cuda_util::DeviceScratch reshaped;                   // antidiagonal: reshaped keys, queries
  // The arguments of the last call if it was a count pass that succeeded, else empty: what that
  // pass left in the scratch above and in its offsets is then still there for its fill pass.
  sparse_index_cuda::CallFingerprint count_pass;
};

namespace sparse_index_cuda {

// Clears the error word and the recorded count pass (every user of the workspace starts here, so a
// record survives only until the next call), and checks tiles (kSparseTileRows rules) and runs
// (sorted, disjoint) on the device; either may be empty.
Status BeginChecks(SparseIndexCudaWorkspace::Impl& ws, ConstTensorView tiles, ConstTensorView runs,
                   cudaStream_t stream);
// offsets[0] = 0 and offsets[1..items] = the inclusive sum of the counts the count kernel wrote
// there.
Status ScanOffsets(SparseIndexCudaWorkspace::Impl& ws, int64_t* offsets, int64_t items,
                   cudaStream_t stream);
// Reports kSizeMismatch unless the offsets' last entries equal the fill buffers' rows.
Status CheckFillSizes(SparseIndexCudaWorkspace::Impl& ws, const SparseIndexOut& out, int64_t items,
                      cudaStream_t stream);
// Waits for the stream and returns the reported error, if any, as an InvalidArgument of `what`.
Status Finish(SparseIndexCudaWorkspace::Impl& ws, const char* what, cudaStream_t stream);

// For a builder, before BeginChecks: whether this call is a fill pass that may skip what its
// count pass computed (selection, per-head data in ws.heads, offsets): the caller vouches that
// the inputs' data and the offsets are unchanged (`inputs_unchanged`) and `call` equals the
// recorded count pass exactly. An empty record (any other call in between, a failed count pass)
// never matches.
bool ReusesCountPass(const SparseIndexCudaWorkspace::Impl& ws, const CallFingerprint& call,
                     const SparseIndexOut& out, bool inputs_unchanged);
// Finish for a builder: a count pass that succeeded records `call` for the fill pass.
Status FinishBuild(SparseIndexCudaWorkspace::Impl& ws, const char* what, const SparseIndexOut& out,
                   CallFingerprint call, cudaStream_t stream);

// Blocks of 256 threads for `count` warps (at least one block, at most the grid's x limit; the
// kernels loop over what is left).
unsigned WarpBlocks(int64_t count);

}  // namespace sparse_index_cuda
}  // namespace millipede
