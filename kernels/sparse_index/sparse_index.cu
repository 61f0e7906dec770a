#include <algorithm>
#include <cub/device/device_scan.cuh>
#include <string>
#include <utility>

#include "common/cuda_check.h"
#include "kernels/sparse_index/sparse_index.cuh"

namespace millipede {

SparseIndexCudaWorkspace::SparseIndexCudaWorkspace() : impl_(std::make_unique<Impl>()) {}

SparseIndexCudaWorkspace::~SparseIndexCudaWorkspace() {
  if (impl_->error != nullptr) cudaFree(impl_->error);
  if (impl_->host_error != nullptr) cudaFreeHost(impl_->host_error);
}

StatusOr<std::unique_ptr<SparseIndexCudaWorkspace>> SparseIndexCudaWorkspace::Create() {
  auto ws = std::unique_ptr<SparseIndexCudaWorkspace>(new SparseIndexCudaWorkspace());
  MP_CUDA_CHECK(cudaMalloc(&ws->impl_->error, sizeof(sparse_index_cuda::ErrorWord)));
  MP_CUDA_CHECK(cudaMallocHost(&ws->impl_->host_error, sizeof(sparse_index_cuda::ErrorWord)));
  return ws;
}

namespace sparse_index_cuda {
namespace {

constexpr int kThreads = 256;

// Tiles: 1 to kSparseTileRows rows, non-negative rows and positions, within one multiple of
// kSparseTileRows. Runs: 0 <= pos_begin <= pos_end, row_begin >= 0, sorted and disjoint.
__global__ void CheckLayoutKernel(const int64_t* tiles, int64_t n_tiles, const int64_t* runs,
                                  int64_t n_runs, ErrorWord* error) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < max(n_tiles, n_runs); i += stride) {
    if (i < n_tiles) {
      const int64_t row_begin = tiles[3 * i], row_end = tiles[3 * i + 1], pos = tiles[3 * i + 2];
      const int64_t rows = row_end - row_begin;
      if (row_begin < 0 || rows < 1 || rows > kSparseTileRows || pos < 0 ||
          pos / kSparseTileRows != (pos + rows - 1) / kSparseTileRows)
        Report(error, kBadTile, i, row_begin, row_end, pos);
    }
    if (i < n_runs) {
      const int64_t pos_begin = runs[3 * i], pos_end = runs[3 * i + 1], row = runs[3 * i + 2];
      if (pos_begin < 0 || pos_end < pos_begin || row < 0 ||
          (i > 0 && pos_begin < runs[3 * (i - 1) + 1]))
        Report(error, kBadRun, i, pos_begin, pos_end, row);
    }
  }
}

__global__ void CheckFillSizesKernel(const int64_t* range_offsets, const int64_t* column_offsets,
                                     int64_t items, int64_t n_ranges, int64_t n_columns,
                                     ErrorWord* error) {
  if (range_offsets[items] != n_ranges)
    Report(error, kSizeMismatch, 0, n_ranges, range_offsets[items]);
  if (column_offsets[items] != n_columns)
    Report(error, kSizeMismatch, 1, n_columns, column_offsets[items]);
}

std::string FormatError(const ErrorWord& e) {
  const int64_t* v = e.values;
  using detail::StrCat;
  switch (e.code) {
    case kBadTile:
      return StrCat("tile ", v[0], " (rows [", v[1], ", ", v[2], ") at position ", v[3],
                    ") needs 1 to ", kSparseTileRows,
                    " rows, non-negative rows and positions, and no crossing of a multiple of ",
                    kSparseTileRows);
    case kBadRun:
      return StrCat("run ", v[0], " (positions [", v[1], ", ", v[2], ") at row ", v[3],
                    ") is malformed, out of order or overlaps the previous run");
    case kBadSelection:
      return StrCat("KV head ", v[0], (v[1] == 0 ? " columns[" : " diagonals["), v[2], "] = ", v[3],
                    ": selections must be >= 0 and strictly ascending, then -1");
    case kAbsentPosition:
      return StrCat("KV head ", v[0], ", tile ", v[1], ": key position ", v[2],
                    " is not in the key layout");
    case kSizeMismatch:
      return StrCat((v[0] == 0 ? "ranges" : "columns"), " sized ", v[1], ", but the index has ",
                    v[2], " (sizes from the count pass)");
    case kTileCrossesBlock:
      return StrCat("tile ", v[0], " at position ", v[1], " crosses a multiple of block ", v[2]);
    case kTileBeyondBlocks:
      return StrCat("tile ", v[0], " is in block ", v[1], ", beyond ", v[2], " blocks");
    case kEmptyQueryBlock:
      return StrCat("tile ", v[0], " is in query block ", v[1], ", whose query count is 0");
    case kRowsNotCovered:
      return StrCat("the runs do not cover each row of x exactly once (run ", v[0], "; ", v[1],
                    " rows covered of ", v[2], ")");
    case kPositionBeyond:
      return StrCat("position ", v[0], " is in block ", v[1], ", beyond ", v[2], " blocks");
    case kAbsentKey:
      return StrCat("key position ", v[0], " is not in k");
    default:
      return StrCat("unknown error code ", e.code);
  }
}

}  // namespace

unsigned WarpBlocks(int64_t count) {
  const int64_t blocks = (std::max<int64_t>(count, 1) * 32 + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::min<int64_t>(blocks, 1 << 30));
}

Status BeginChecks(SparseIndexCudaWorkspace::Impl& ws, ConstTensorView tiles, ConstTensorView runs,
                   cudaStream_t stream) {
  ws.count_pass = {};
  MP_CUDA_CHECK(cudaMemsetAsync(ws.error, 0, sizeof(ErrorWord), stream));
  const int64_t n_tiles = tiles.data != nullptr ? tiles.dim(0) : 0;
  const int64_t n_runs = runs.data != nullptr ? runs.dim(0) : 0;
  const int64_t n = std::max(n_tiles, n_runs);
  if (n == 0) return OkStatus();
  const unsigned blocks =
      static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 1024));
  CheckLayoutKernel<<<blocks, kThreads, 0, stream>>>(tiles.as<const int64_t>(), n_tiles,
                                                     runs.as<const int64_t>(), n_runs, ws.error);
  MP_CUDA_CHECK_LAUNCH();
  return OkStatus();
}

Status ScanOffsets(SparseIndexCudaWorkspace::Impl& ws, int64_t* offsets, int64_t items,
                   cudaStream_t stream) {
  MP_CUDA_CHECK(cudaMemsetAsync(offsets, 0, sizeof(int64_t), stream));
  if (items == 0) return OkStatus();
  size_t bytes = 0;
  MP_CUDA_CHECK(
      cub::DeviceScan::InclusiveSum(nullptr, bytes, offsets + 1, offsets + 1, items, stream));
  MP_RETURN_IF_ERROR(ws.scan.Reserve(bytes, stream));
  // In place: CUB allows the input and output ranges to be the same.
  MP_CUDA_CHECK(cub::DeviceScan::InclusiveSum(ws.scan.data(), bytes, offsets + 1, offsets + 1,
                                              items, stream));
  return OkStatus();
}

Status CheckFillSizes(SparseIndexCudaWorkspace::Impl& ws, const SparseIndexOut& out, int64_t items,
                      cudaStream_t stream) {
  CheckFillSizesKernel<<<1, 1, 0, stream>>>(out.range_offsets.as<const int64_t>(),
                                            out.column_offsets.as<const int64_t>(), items,
                                            out.ranges.dim(0), out.columns.dim(0), ws.error);
  MP_CUDA_CHECK_LAUNCH();
  return OkStatus();
}

Status Finish(SparseIndexCudaWorkspace::Impl& ws, const char* what, cudaStream_t stream) {
  MP_CUDA_CHECK(
      cudaMemcpyAsync(ws.host_error, ws.error, sizeof(ErrorWord), cudaMemcpyDeviceToHost, stream));
  MP_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (ws.host_error->code == kNoError) return OkStatus();
  return InvalidArgumentError(detail::StrCat(what, ": ", FormatError(*ws.host_error)));
}

bool ReusesCountPass(const SparseIndexCudaWorkspace::Impl& ws, const CallFingerprint& call,
                     const SparseIndexOut& out, bool inputs_unchanged) {
  return inputs_unchanged && !out.CountPass() && !ws.count_pass.empty() && ws.count_pass == call;
}

Status FinishBuild(SparseIndexCudaWorkspace::Impl& ws, const char* what, const SparseIndexOut& out,
                   CallFingerprint call, cudaStream_t stream) {
  MP_RETURN_IF_ERROR(Finish(ws, what, stream));
  if (out.CountPass()) ws.count_pass = std::move(call);
  return OkStatus();
}

}  // namespace sparse_index_cuda
}  // namespace millipede
