#include <algorithm>
#include <climits>
#include <cstdint>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>

#include "common/cuda_check.h"
#include "kernels/cuda_util.cuh"
#include "kernels/selection/top_k_cuda.h"
#include "kernels/selection/top_k_key.h"

namespace millipede {
namespace top_k_cuda_internal {

// One row's progress through the radix select. After the last pass `prefix` is the threshold key
// T (the selected-th largest) and `remaining` the number of keys equal to T that are kept.
struct RowState {
  uint32_t prefix;       // bits of T found so far
  uint32_t mask;         // which bits of `prefix` are known
  int32_t remaining;     // T's rank among the keys that match `prefix` (1-based); 0: none wanted
  int32_t selected;      // min(k, selectable entries)
  int32_t next_greater;  // compaction: next free slot for a key above T
  int32_t unused;
};

}  // namespace top_k_cuda_internal

using top_k_cuda_internal::RowState;

struct TopKCudaWorkspace::Impl {
  cuda_util::DeviceScratch scratch;
};

TopKCudaWorkspace::TopKCudaWorkspace() : impl_(std::make_unique<Impl>()) {}
TopKCudaWorkspace::~TopKCudaWorkspace() = default;
uint64_t TopKCudaWorkspace::generation() const { return impl_->scratch.generation(); }

StatusOr<std::unique_ptr<TopKCudaWorkspace>> TopKCudaWorkspace::Create() {
  return std::unique_ptr<TopKCudaWorkspace>(new TopKCudaWorkspace());
}

namespace {

constexpr int kThreads = 256;
constexpr int kDigitBits = 8;
constexpr int kBuckets = 1 << kDigitBits;
constexpr int kPasses = 32 / kDigitBits;
constexpr int kMaxGridY = 65535;
// Rows of one batch hold at most this many kept candidates (CUB's item counts are int).
constexpr int64_t kMaxBatchCandidates = int64_t{1} << 28;

// Blocks cover [chunk * blockIdx.x, +chunk) of rows blockIdx.y, blockIdx.y + gridDim.y, ...
struct Tiling {
  int64_t rows, cols, chunk, chunks;
};

// Counts, per row, the digit at `shift` of the selectable keys that match the row's prefix.
//   scores [rows, cols], state [rows], hist [rows, kBuckets] (zero on entry).
__global__ void HistogramKernel(const float* __restrict__ scores, Tiling t,
                                const RowState* __restrict__ state, uint32_t* __restrict__ hist,
                                int shift, bool first) {
  __shared__ uint32_t local[kBuckets];
  for (int64_t row = blockIdx.y; row < t.rows; row += gridDim.y) {
    const RowState s = state[row];
    // The first pass sees every row (its state is all zero); later ones skip rows that want
    // nothing. Uniform over the block.
    if (!first && s.remaining == 0) continue;
    for (int b = threadIdx.x; b < kBuckets; b += blockDim.x) local[b] = 0;
    __syncthreads();
    const float* x = scores + row * t.cols;
    const int64_t begin = blockIdx.x * t.chunk, end = min(t.cols, begin + t.chunk);
    // Lanes with the same digit add once for all (ties and near-ties would otherwise queue on
    // one shared counter); every lane runs every tile, so the full-warp match is safe.
    for (int64_t tile = begin; tile < end; tile += blockDim.x) {
      const int64_t i = tile + threadIdx.x;
      const uint32_t key = i < end ? TopKFloatKey(x[i]) : 0;
      const int digit =
          key != 0 && (key & s.mask) == s.prefix ? static_cast<int>((key >> shift) & 0xff) : -1;
      const unsigned peers = __match_any_sync(0xffffffffu, digit);
      if (digit >= 0 && static_cast<int>(threadIdx.x % 32) == __ffs(peers) - 1)
        atomicAdd(&local[digit], static_cast<uint32_t>(__popc(peers)));
    }
    __syncthreads();
    for (int b = threadIdx.x; b < kBuckets; b += blockDim.x)
      if (local[b] != 0) atomicAdd(&hist[row * kBuckets + b], local[b]);
    __syncthreads();
  }
}

// One thread per row: picks the digit at `shift` of the threshold from the row's histogram and
// clears the histogram for the next pass. The first pass also counts the selectable keys.
__global__ void SelectDigitKernel(uint32_t* __restrict__ hist, RowState* __restrict__ state,
                                  int64_t rows, int64_t k, int shift, bool first) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  RowState s = state[row];
  uint32_t* h = hist + row * kBuckets;
  if (first) {
    int64_t total = 0;
    for (int b = 0; b < kBuckets; ++b) total += h[b];
    s.selected = static_cast<int32_t>(min(k, total));
    s.remaining = s.selected;
  }
  if (s.remaining > 0) {
    int64_t above = 0;
    for (int b = kBuckets - 1; b >= 0; --b) {
      if (above + h[b] >= s.remaining) {
        s.prefix |= static_cast<uint32_t>(b) << shift;
        s.mask |= 0xffu << shift;
        s.remaining -= static_cast<int32_t>(above);
        break;
      }
      above += h[b];
    }
  }
  for (int b = 0; b < kBuckets; ++b) h[b] = 0;
  state[row] = s;
}

// Per (row, chunk): how many keys equal the row's threshold and, for column order, how many lie
// above it.  eq_count, gt_count [rows, chunks] (gt_count null for value order).
__global__ void CountKernel(const float* __restrict__ scores, Tiling t,
                            const RowState* __restrict__ state, int32_t* __restrict__ eq_count,
                            int32_t* __restrict__ gt_count) {
  using Reduce = cub::BlockReduce<int32_t, kThreads>;
  __shared__ typename Reduce::TempStorage storage;
  for (int64_t row = blockIdx.y; row < t.rows; row += gridDim.y) {
    const RowState s = state[row];
    if (s.selected == 0) continue;
    const float* x = scores + row * t.cols;
    const int64_t end = min(t.cols, (blockIdx.x + 1) * t.chunk);
    int32_t equal = 0, greater = 0;
    for (int64_t i = blockIdx.x * t.chunk + threadIdx.x; i < end; i += blockDim.x) {
      const uint32_t key = TopKFloatKey(x[i]);
      equal += key == s.prefix;
      greater += key > s.prefix;
    }
    const int32_t total = Reduce(storage).Sum(equal);
    if (threadIdx.x == 0) eq_count[row * t.chunks + blockIdx.x] = total;
    __syncthreads();
    if (gt_count != nullptr) {
      const int32_t above = Reduce(storage).Sum(greater);
      if (threadIdx.x == 0) gt_count[row * t.chunks + blockIdx.x] = above;
      __syncthreads();
    }
  }
}

// The sum over the block of each thread's `value`, in every thread.
template <typename Reduce, typename Storage>
__device__ int32_t BlockSum(Storage& storage, int32_t* shared, int32_t value) {
  const int32_t sum = Reduce(storage).Sum(value);
  __syncthreads();
  // Thread 0 holds the reduction; every thread needs it.
  if (threadIdx.x == 0) *shared = sum;
  __syncthreads();
  const int32_t out = *shared;
  __syncthreads();
  return out;
}

// Writes the kept entries of each row as candidates: every key above the threshold and the
// lowest-column `remaining` keys equal to it. Value order: the keys above in slots [0, greater)
// in any order (the sort orders them), the equal ones in slots [greater, selected) in column
// order. Column order (gt_count set): every kept key at its rank by column, so no sort is
// needed: a key at column i lands at (keys above before i) + min(equal keys before i,
// remaining).  candidates [rows, kept].
__global__ void CompactKernel(const float* __restrict__ scores, Tiling t,
                              RowState* __restrict__ state, const int32_t* __restrict__ eq_count,
                              const int32_t* __restrict__ gt_count,
                              uint64_t* __restrict__ candidates, int64_t kept) {
  using Scan = cub::BlockScan<int32_t, kThreads>;
  using Reduce = cub::BlockReduce<int32_t, kThreads>;
  __shared__ union {
    typename Scan::TempStorage scan;
    typename Reduce::TempStorage reduce;
  } storage;
  __shared__ int32_t shared_sum;
  const bool by_column = gt_count != nullptr;
  for (int64_t row = blockIdx.y; row < t.rows; row += gridDim.y) {
    const RowState s = state[row];
    if (s.selected == 0) continue;
    const int32_t greater = s.selected - s.remaining;
    int32_t eq_before = 0, gt_before = 0;  // in earlier chunks of the row
    for (int64_t c = threadIdx.x; c < blockIdx.x; c += blockDim.x) {
      eq_before += eq_count[row * t.chunks + c];
      if (by_column) gt_before += gt_count[row * t.chunks + c];
    }
    int32_t eq_base = BlockSum<Reduce>(storage.reduce, &shared_sum, eq_before);
    int32_t gt_base = by_column ? BlockSum<Reduce>(storage.reduce, &shared_sum, gt_before) : 0;
    const float* x = scores + row * t.cols;
    uint64_t* out = candidates + row * kept;
    const int64_t begin = blockIdx.x * t.chunk, end = min(t.cols, begin + t.chunk);
    for (int64_t tile = begin; tile < end; tile += blockDim.x) {
      const int64_t i = tile + threadIdx.x;
      const uint32_t key = i < end ? TopKFloatKey(x[i]) : 0;
      const int32_t equal = key == s.prefix && key != 0, above = key > s.prefix;
      // A tile counts at most kThreads of each, so both ranks fit one scan: above in the high half.
      int32_t rank = 0, tile_total = 0;
      Scan(storage.scan).ExclusiveSum(equal | (above << 16), rank, tile_total);
      __syncthreads();
      const int32_t eq_rank = eq_base + (rank & 0xffff), gt_rank = gt_base + (rank >> 16);
      if (by_column) {
        if (above) out[gt_rank + min(eq_rank, s.remaining)] = TopKEntryKey(key, i);
        if (equal && eq_rank < s.remaining) out[gt_rank + eq_rank] = TopKEntryKey(key, i);
      } else {
        if (above) out[atomicAdd(&state[row].next_greater, 1)] = TopKEntryKey(key, i);
        if (equal && eq_rank < s.remaining) out[greater + eq_rank] = TopKEntryKey(key, i);
      }
      eq_base += tile_total & 0xffff;
      gt_base += tile_total >> 16;
    }
  }
}

// Segment r of the sort is [r * kept, (r + 1) * kept).  offsets [rows + 1].
__global__ void OffsetsKernel(int32_t* __restrict__ offsets, int64_t rows, int64_t kept) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r <= rows) offsets[r] = static_cast<int32_t>(r * kept);
}

// index/value [rows, k] from the candidates in output order (sorted, or compacted by column);
// slots past `selected` get (-1, -inf).
__global__ void OutputKernel(const float* __restrict__ scores, int64_t rows, int64_t cols,
                             int64_t k, const RowState* __restrict__ state,
                             const uint64_t* __restrict__ sorted, int64_t kept,
                             int32_t* __restrict__ index, float* __restrict__ value) {
  const int64_t total = rows * k;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const int64_t row = i / k, slot = i - row * k;
    if (slot < state[row].selected) {
      const int64_t column = 0xffffffffu - static_cast<uint32_t>(sorted[row * kept + slot]);
      index[i] = static_cast<int32_t>(column);
      value[i] = scores[row * cols + column];
    } else {
      index[i] = -1;
      value[i] = -INFINITY;
    }
  }
}

}  // namespace

namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Carves consecutive 256-byte-aligned pieces out of one scratch buffer.
class Carver {
 public:
  explicit Carver(char* base) : base_(base) {}
  template <typename T>
  T* Take(int64_t count) {
    // base_ may be null when only the size is wanted.
    T* p = reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(base_) + used_);
    used_ += (static_cast<size_t>(count) * sizeof(T) + 255) / 256 * 256;
    return p;
  }
  size_t used() const { return used_; }

 private:
  char* base_;
  size_t used_ = 0;
};

struct Batch {
  RowState* state;
  uint32_t* hist;
  int32_t* eq_count;
  int32_t* gt_count;
  uint64_t* candidates;
  uint64_t* sorted;
  int32_t* offsets;
  void* temp;
  size_t temp_bytes;
};

Batch CarveBatch(char* base, int64_t rows, int64_t chunks, int64_t kept, size_t temp_bytes,
                 size_t* used) {
  Carver c(base);
  Batch b{};
  b.state = c.Take<RowState>(rows);
  b.hist = c.Take<uint32_t>(rows * kBuckets);
  b.eq_count = c.Take<int32_t>(rows * chunks);
  b.gt_count = c.Take<int32_t>(rows * chunks);
  b.candidates = c.Take<uint64_t>(rows * kept);
  b.sorted = c.Take<uint64_t>(rows * kept);
  b.offsets = c.Take<int32_t>(rows + 1);
  b.temp = c.Take<char>(static_cast<int64_t>(temp_bytes));
  b.temp_bytes = temp_bytes;
  *used = c.used();
  return b;
}

// The radix select, compaction and (for value order) sort for rows [0, t.rows) of `scores`
// (already offset to the batch), writing `index` and `value` (offset likewise).
Status TopKBatch(const float* scores, Tiling t, int64_t k, int64_t kept, TopKOrder order, Batch b,
                 int32_t* index, float* value, cudaStream_t stream) {
  const bool by_column = order == TopKOrder::kColumn;
  const dim3 grid(static_cast<unsigned>(t.chunks),
                  static_cast<unsigned>(std::min<int64_t>(t.rows, kMaxGridY)));
  const unsigned row_blocks = static_cast<unsigned>(CeilDiv(t.rows + 1, kThreads));
  MP_CUDA_CHECK(cudaMemsetAsync(b.state, 0, t.rows * sizeof(RowState), stream));
  if (kept > 0) {
    MP_CUDA_CHECK(cudaMemsetAsync(b.hist, 0, t.rows * kBuckets * sizeof(uint32_t), stream));
    MP_CUDA_CHECK(cudaMemsetAsync(b.candidates, 0, t.rows * kept * sizeof(uint64_t), stream));
    for (int pass = 0; pass < kPasses; ++pass) {
      const int shift = 32 - kDigitBits * (pass + 1);
      HistogramKernel<<<grid, kThreads, 0, stream>>>(scores, t, b.state, b.hist, shift, pass == 0);
      MP_CUDA_CHECK_LAUNCH();
      SelectDigitKernel<<<row_blocks, kThreads, 0, stream>>>(b.hist, b.state, t.rows, k, shift,
                                                             pass == 0);
      MP_CUDA_CHECK_LAUNCH();
    }
    int32_t* const gt_count = by_column ? b.gt_count : nullptr;
    CountKernel<<<grid, kThreads, 0, stream>>>(scores, t, b.state, b.eq_count, gt_count);
    MP_CUDA_CHECK_LAUNCH();
    CompactKernel<<<grid, kThreads, 0, stream>>>(scores, t, b.state, b.eq_count, gt_count,
                                                 b.candidates, kept);
    MP_CUDA_CHECK_LAUNCH();
  }
  if (kept > 0 && !by_column) {
    OffsetsKernel<<<row_blocks, kThreads, 0, stream>>>(b.offsets, t.rows, kept);
    MP_CUDA_CHECK_LAUNCH();
    size_t temp_bytes = b.temp_bytes;
    const int32_t* offsets = b.offsets;
    MP_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortKeysDescending(
        b.temp, temp_bytes, b.candidates, b.sorted, static_cast<int>(t.rows * kept),
        static_cast<int>(t.rows), offsets, offsets + 1, 0, 64, stream));
  }
  const int64_t outputs = t.rows * k;
  const unsigned out_blocks =
      static_cast<unsigned>(std::min<int64_t>(CeilDiv(outputs, kThreads), 4096));
  OutputKernel<<<out_blocks, kThreads, 0, stream>>>(
      scores, t.rows, t.cols, k, b.state, by_column ? b.candidates : b.sorted, kept, index, value);
  MP_CUDA_CHECK_LAUNCH();
  return OkStatus();
}

}  // namespace

Status TopKCuda(const TopKArgs& args, TopKCudaWorkspace& workspace, cudaStream_t stream) {
  MP_RETURN_IF_ERROR(TopKCheckArgs(args));
  const int64_t rows = args.scores.dim(0), cols = args.scores.dim(1), k = args.k;
  if (rows == 0 || k == 0) return OkStatus();
  const int64_t kept = std::min(k, cols);
  const int64_t batch_rows = std::max<int64_t>(
      1, std::min({rows, int64_t{1} << 16, kMaxBatchCandidates / std::max<int64_t>(kept, 1)}));
  // ~1024 blocks per pass over the batch, each over at least 2048 columns of one row.
  const int64_t chunks_per_row =
      std::clamp<int64_t>(CeilDiv(1024, batch_rows), 1, std::max<int64_t>(1, CeilDiv(cols, 2048)));
  const int64_t chunk =
      std::max<int64_t>(kThreads, CeilDiv(CeilDiv(cols, chunks_per_row), kThreads) * kThreads);
  const int64_t chunks = std::max<int64_t>(1, CeilDiv(cols, chunk));

  size_t temp_bytes = 0;
  if (kept > 0 && args.order == TopKOrder::kValue)
    MP_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortKeysDescending(
        nullptr, temp_bytes, static_cast<const uint64_t*>(nullptr), static_cast<uint64_t*>(nullptr),
        static_cast<int>(batch_rows * kept), static_cast<int>(batch_rows),
        static_cast<const int32_t*>(nullptr), static_cast<const int32_t*>(nullptr), 0, 64, stream));
  size_t bytes = 0;
  CarveBatch(nullptr, batch_rows, chunks, kept, temp_bytes, &bytes);
  cuda_util::DeviceScratch& scratch = workspace.impl().scratch;
  MP_RETURN_IF_ERROR(scratch.Reserve(bytes, stream));
  const Batch b =
      CarveBatch(static_cast<char*>(scratch.data()), batch_rows, chunks, kept, temp_bytes, &bytes);

  for (int64_t r0 = 0; r0 < rows; r0 += batch_rows) {
    const int64_t n = std::min(batch_rows, rows - r0);
    const Tiling t{n, cols, chunk, chunks};
    MP_RETURN_IF_ERROR(TopKBatch(args.scores.as<const float>() + r0 * cols, t, k, kept, args.order, b,
                                 args.index.as<int32_t>() + r0 * k, args.value.as<float>() + r0 * k,
                                 stream));
  }
  return OkStatus();
}

}  // namespace millipede
