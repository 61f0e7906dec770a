// The CUDA backend's selection ops, sparse index ops and sparse attention against the CPU
// backend, and its copy queue: a copy started after a kernel sees the kernel's result; compute
// made to wait for a copy sees the copied data; a copy's source is safe from compute queued after
// ComputeWaitFor; a copy runs on while compute is synchronised (no device-wide wait inside);
// gathers from page-locked host memory, large blocks (mapped and registered) included; OmniKV's
// selection (top-k in column order, the gather index) as on the CPU; bad gather indices reported
// by Synchronize / WaitCopy; pageable memory refused. Skips without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "tests/kernels/attention/sparse_test_util.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/op_harness.h"
#include "worker/backend/backend.h"
#include "worker/backend/backend_factory.h"
#include "worker/backend/cpu_backend.h"

namespace millipede {
namespace {

using testing::CView;
using testing::HaveGpu;
using testing::RandomTensor;

class CudaBackendOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
    auto b = CreateBackend(BackendKind::kCuda, 0);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    gpu_ = std::move(b).value();
    cpu_ = CreateCpuBackend();
  }

  BackendTensor Upload(const HostTensor& host) {
    auto t = gpu_->Allocate(host.dtype(), host.shape());
    EXPECT_TRUE(t.ok());
    EXPECT_TRUE(gpu_->CopyFromHost(CView(host), t->view()).ok());
    return std::move(t).value();
  }
  HostTensor Download(ConstTensorView device) {
    HostTensor host(device.dtype, device.shape);
    EXPECT_TRUE(gpu_->CopyToHost(device, host.view()).ok());
    return host;
  }
  // Page-locked host memory filled with row * width + column (I32 [rows, width]).
  BackendTensor PinnedPattern(int64_t rows, int64_t width, int32_t offset) {
    auto t = gpu_->AllocateHost(DType::kI32, {rows, width});
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    int32_t* p = t->view().as<int32_t>();
    std::iota(p, p + rows * width, offset);
    return std::move(t).value();
  }
  BackendTensor Filled(int64_t rows, int64_t width, int32_t value) {
    HostTensor host(DType::kI32, {rows, width});
    std::fill_n(host.data<int32_t>(), host.NumElements(), value);
    return Upload(host);
  }
  BackendTensor Index(const std::vector<int64_t>& rows) {
    HostTensor host(DType::kI64, {static_cast<int64_t>(rows.size())});
    std::copy(rows.begin(), rows.end(), host.data<int64_t>());
    return Upload(host);
  }

  std::unique_ptr<Backend> gpu_, cpu_;
};

// 2^15 rows of 4 KiB: 128 MiB, several milliseconds to move across PCIe either way.
constexpr int64_t kRows = int64_t{1} << 15, kWidth = 1024;

std::vector<int64_t> Reversed(int64_t n) {
  std::vector<int64_t> rows(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) rows[static_cast<size_t>(i)] = n - 1 - i;
  return rows;
}

// Scratch memory (the stream-ordered pool): usable by the compute queue's ops, and memory freed
// into the pool is the device's again when Allocate needs it: scratch of half the free memory,
// freed, then an allocation of 60% of it (together more than there is).
TEST_F(CudaBackendOpsTest, ScratchMemoryIsUsableAndGoesBackWhenNeeded) {
  HostTensor host(DType::kI32, {1000});
  std::iota(host.data<int32_t>(), host.data<int32_t>() + 1000, 7);
  {
    auto t = gpu_->AllocateScratch(DType::kI32, {1000});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    ASSERT_TRUE(gpu_->CopyFromHost(CView(host), t->view()).ok());
    const HostTensor back = Download(t->cview());
    EXPECT_TRUE(
        std::equal(back.data<int32_t>(), back.data<int32_t>() + 1000, host.data<int32_t>()));
  }
  size_t free_bytes = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  const int64_t tenth = static_cast<int64_t>(free_bytes / 10);
  {
    auto big = gpu_->AllocateScratch(DType::kU8, {5 * tenth});
    ASSERT_TRUE(big.ok()) << big.status().ToString();
  }
  auto most = gpu_->Allocate(DType::kU8, {6 * tenth});
  EXPECT_TRUE(most.ok()) << most.status().ToString();
}

TEST_F(CudaBackendOpsTest, SelectionOpsMatchTheCpuBackend) {
  // TopK over tie-heavy rows.
  HostTensor scores = RandomTensor(DType::kF32, {6, 50000}, 1, -3.0f, 3.0f);
  for (int64_t i = 0; i < scores.NumElements(); i += 3)
    scores.data<float>()[i] = std::round(scores.data<float>()[i]);
  HostTensor index_cpu(DType::kI32, {6, 3000}), value_cpu(DType::kF32, {6, 3000});
  ASSERT_TRUE(cpu_->TopK({CView(scores), 3000, index_cpu.view(), value_cpu.view()}).ok());
  BackendTensor d_scores = Upload(scores);
  auto d_index = gpu_->Allocate(DType::kI32, {6, 3000});
  auto d_value = gpu_->Allocate(DType::kF32, {6, 3000});
  ASSERT_TRUE(gpu_->TopK({d_scores.cview(), 3000, d_index->view(), d_value->view()}).ok());
  const HostTensor index = Download(d_index->cview()), value = Download(d_value->cview());
  EXPECT_EQ(std::memcmp(index.view().data, index_cpu.view().data, index.NumBytes()), 0);
  EXPECT_EQ(std::memcmp(value.view().data, value_cpu.view().data, value.NumBytes()), 0);

  // KeyScores, BF16 keys, GQA.
  const int64_t n_q = 12, heads = 8, kv_heads = 2, d = 64, n_k = 3000;
  HostTensor q = RandomTensor(DType::kF32, {n_q, heads, d}, 2);
  HostTensor k = RandomTensor(DType::kBF16, {n_k, kv_heads, d}, 3);
  HostTensor lse = RandomTensor(DType::kF32, {n_q, heads}, 4, 5.0f, 7.0f);
  HostTensor q_pos(DType::kI64, {n_q}), k_pos(DType::kI64, {n_k});
  for (int64_t t = 0; t < n_q; ++t) q_pos.data<int64_t>()[t] = n_k - n_q + t;
  for (int64_t j = 0; j < n_k; ++j) k_pos.data<int64_t>()[j] = j;
  HostTensor score_cpu(DType::kF32, {kv_heads, n_k});
  ASSERT_TRUE(cpu_->KeyScores({CView(q),
                               CView(q_pos),
                               CView(k),
                               CView(k_pos),
                               CView(lse),
                               0.0f,
                               score_cpu.view(),
                               {}})
                  .ok());
  BackendTensor d_q = Upload(q), d_q_pos = Upload(q_pos), d_k = Upload(k), d_k_pos = Upload(k_pos),
                d_lse = Upload(lse);
  auto d_score = gpu_->Allocate(DType::kF32, {kv_heads, n_k});
  ASSERT_TRUE(gpu_->KeyScores({d_q.cview(),
                               d_q_pos.cview(),
                               d_k.cview(),
                               d_k_pos.cview(),
                               d_lse.cview(),
                               0.0f,
                               d_score->view(),
                               {}})
                  .ok());
  EXPECT_TRUE(testing::MatchesReference(Download(d_score->cview()), score_cpu,
                                        testing::Tolerance::Normalised(2e-5)));

  // GatherRows of one KV head's keys through the flat view.
  std::vector<int64_t> rows;
  for (int64_t j = 0; j < n_k; j += 7) rows.push_back(j * kv_heads + 1);
  BackendTensor d_rows = Index(rows);
  auto flat = Reshape(d_k.cview(), Shape{n_k * kv_heads, d});
  auto host_flat = Reshape(CView(k), Shape{n_k * kv_heads, d});
  const int64_t m = static_cast<int64_t>(rows.size());
  HostTensor rows_host(DType::kI64, {m}), gathered_cpu(DType::kBF16, {m, d});
  std::copy(rows.begin(), rows.end(), rows_host.data<int64_t>());
  ASSERT_TRUE(cpu_->GatherRows({*host_flat, CView(rows_host), gathered_cpu.view()}).ok());
  auto gathered = gpu_->Allocate(DType::kBF16, {m, d});
  ASSERT_TRUE(gpu_->GatherRows({*flat, d_rows.cview(), gathered->view()}).ok());
  const HostTensor got = Download(gathered->cview());
  EXPECT_EQ(std::memcmp(got.view().data, gathered_cpu.view().data, got.NumBytes()), 0);
}

// OmniKV's selection on one rank: each KV head's best rows in column order (one head with NaN
// scores comes up short), then the gather index over three blocks and the heads' counts.
TEST_F(CudaBackendOpsTest, OmniKvSelectionMatchesTheCpuBackend) {
  const int64_t kv_heads = 6, n = 50000, slots = 3000, blocks = 3, stride = n * kv_heads + 5;
  HostTensor scores = RandomTensor(DType::kF32, {kv_heads, n}, 11, 0.0f, 1.0f);
  for (int64_t i = 0; i < n; i += 3) scores.data<float>()[i] = 0.5f;  // ties
  for (int64_t i = 2 * n; i < 2 * n + n - 100; ++i) scores.data<float>()[i] = std::nanf("");
  HostTensor chosen_cpu(DType::kI32, {kv_heads, slots}), value_cpu(DType::kF32, {kv_heads, slots});
  ASSERT_TRUE(cpu_->TopK({CView(scores), slots, chosen_cpu.view(), value_cpu.view(),
                          TopKOrder::kColumn})
                  .ok());
  HostTensor index_cpu(DType::kI64, {blocks, slots * kv_heads}), counts_cpu(DType::kI32, {kv_heads});
  ASSERT_TRUE(cpu_->SelectionIndex({CView(chosen_cpu), n, stride, index_cpu.view(),
                                    counts_cpu.view()})
                  .ok());
  EXPECT_EQ(counts_cpu.data<int32_t>()[2], 100);

  BackendTensor d_scores = Upload(scores);
  auto chosen = gpu_->Allocate(DType::kI32, {kv_heads, slots});
  auto value = gpu_->Allocate(DType::kF32, {kv_heads, slots});
  auto index = gpu_->Allocate(DType::kI64, {blocks, slots * kv_heads});
  auto counts = gpu_->Allocate(DType::kI32, {kv_heads});
  ASSERT_TRUE(chosen.ok() && value.ok() && index.ok() && counts.ok());
  ASSERT_TRUE(gpu_->TopK({d_scores.cview(), slots, chosen->view(), value->view(),
                          TopKOrder::kColumn})
                  .ok());
  ASSERT_TRUE(
      gpu_->SelectionIndex({chosen->cview(), n, stride, index->view(), counts->view()}).ok());
  EXPECT_TRUE(testing::SameElementBytes(Download(chosen->cview()), chosen_cpu));
  EXPECT_TRUE(testing::SameElementBytes(Download(value->cview()), value_cpu));
  EXPECT_TRUE(testing::SameElementBytes(Download(index->cview()), index_cpu));
  EXPECT_TRUE(testing::SameElementBytes(Download(counts->cview()), counts_cpu));
}

TEST_F(CudaBackendOpsTest, SparseAttentionMatchesTheCpuBackend) {
  // GQA 4, BF16 K/V, a vertical-slash-like index over 700 positions for 90 queries at the end.
  const int64_t n_q = 90, n_pos = 700, heads = 16, kv_heads = 4, d = 128;
  const HostTensor q = RandomTensor(DType::kF32, {n_q, heads, d}, 5, -2.0f, 2.0f);
  const HostTensor k = RandomTensor(DType::kBF16, {n_pos, kv_heads, d}, 6, -2.0f, 2.0f);
  const HostTensor v = RandomTensor(DType::kBF16, {n_pos, kv_heads, d}, 7);
  const std::vector<testing::SparseRow3> tiles = testing::SparseTilesOf(n_q, n_pos - n_q);
  std::mt19937_64 rng(8);
  std::vector<testing::SparseItem> items;
  for (int64_t g = 0; g < kv_heads; ++g)
    for (const testing::SparseRow3& t : tiles)
      items.push_back(testing::RandomSparseItem(rng, t[2] + t[1] - t[0] - 1, n_pos, 4));
  const testing::SparseCase sc =
      testing::BuildSparseCase(tiles, items, testing::SparseLayout::Identity(n_pos));
  HostTensor o_cpu(DType::kF32, {n_q, heads, d}), lse_cpu(DType::kF32, {n_q, heads});
  ASSERT_TRUE(cpu_->SparseAttention({CView(q), CView(k), CView(v), CView(sc.tiles), sc.index(),
                                     0.0f, o_cpu.view(), lse_cpu.view()})
                  .ok());
  BackendTensor d_q = Upload(q), d_k = Upload(k), d_v = Upload(v), d_tiles = Upload(sc.tiles),
                d_roff = Upload(sc.range_offsets), d_ranges = Upload(sc.ranges),
                d_coff = Upload(sc.column_offsets), d_columns = Upload(sc.columns);
  auto d_o = gpu_->Allocate(DType::kF32, {n_q, heads, d});
  auto d_lse = gpu_->Allocate(DType::kF32, {n_q, heads});
  ASSERT_TRUE(gpu_->SparseAttention({d_q.cview(),
                                     d_k.cview(),
                                     d_v.cview(),
                                     d_tiles.cview(),
                                     {d_roff.cview(), d_ranges.cview(), d_coff.cview(),
                                      d_columns.cview()},
                                     0.0f,
                                     d_o->view(),
                                     d_lse->view()})
                  .ok());
  // The GPU rounds q and the probabilities to bf16 (sparse_attention_cuda.h).
  EXPECT_TRUE(testing::MatchesReference(Download(d_o->cview()), o_cpu,
                                        testing::Tolerance::Normalised(2e-2)));
  EXPECT_TRUE(testing::MatchesReference(Download(d_lse->cview()), lse_cpu,
                                        testing::Tolerance::Elementwise(0.0, 2e-2)));
}

// The sparse index ops through both backends: block sums of random keys (two runs), the
// block-sparse index from them, and a vertical-slash index, each in two passes.
TEST_F(CudaBackendOpsTest, SparseIndexOpsMatchTheCpuBackend) {
  const int64_t n = 1000, num_blocks = 16, kv_heads = 2, d = 32;
  HostTensor k = RandomTensor(DType::kBF16, {n, kv_heads, d}, 5);
  HostTensor runs(DType::kI64, {2, 3}), tiles(DType::kI64, {16, 3});
  const int64_t run_values[] = {0, 600, 400, 600, 1000, 0};  // positions 600.. at rows 0..
  std::copy(run_values, run_values + 6, runs.data<int64_t>());
  for (int64_t t = 0; t < 16; ++t) {
    const int64_t rows = std::min<int64_t>(64, n - 64 * t);
    const int64_t tile[] = {64 * t, 64 * t + rows, 64 * t};
    std::copy(tile, tile + 3, tiles.data<int64_t>() + 3 * t);
  }
  BackendTensor d_k = Upload(k), d_runs = Upload(runs), d_tiles = Upload(tiles);
  HostTensor sums(DType::kF32, {num_blocks, kv_heads, d}), counts(DType::kF32, {num_blocks});
  ASSERT_TRUE(cpu_->BlockSums({CView(k), CView(runs), 64, 1, sums.view(), counts.view()}).ok());
  auto d_sums = gpu_->Allocate(DType::kF32, {num_blocks, kv_heads, d});
  auto d_counts = gpu_->Allocate(DType::kF32, {num_blocks});
  ASSERT_TRUE(
      gpu_->BlockSums({d_k.cview(), d_runs.cview(), 64, 1, d_sums->view(), d_counts->view()}).ok());
  EXPECT_TRUE(testing::MatchesReference(Download(d_sums->cview()), sums,
                                        testing::Tolerance::Normalised(1e-5)));
  EXPECT_TRUE(
      testing::MatchesReference(Download(d_counts->cview()), counts, testing::Tolerance::Exact()));

  // Both backends build from the CPU's sums, so that the index must match exactly.
  BackendTensor d_exact_sums = Upload(sums), d_exact_counts = Upload(counts);
  const int64_t top_blocks[] = {3, 5};
  HostTensor columns(DType::kI64, {2, 3}), diagonals(DType::kI64, {2, 2});
  const int64_t column_values[] = {1, 300, -1, 5, 6, 700}, diagonal_values[] = {0, 100, 0, -1};
  std::copy(column_values, column_values + 6, columns.data<int64_t>());
  std::copy(diagonal_values, diagonal_values + 4, diagonals.data<int64_t>());
  BackendTensor d_columns = Upload(columns), d_diagonals = Upload(diagonals);
  for (bool block_sparse : {true, false}) {
    std::vector<HostTensor> results;
    for (Backend* backend : {cpu_.get(), gpu_.get()}) {
      const bool on_gpu = backend == gpu_.get();
      auto build = [&](SparseIndexOut out) {
        if (block_sparse) {
          BlockSparseIndexArgs args;
          args.tiles = on_gpu ? d_tiles.cview() : CView(tiles);
          args.runs = on_gpu ? d_runs.cview() : CView(runs);
          args.q_sums = args.k_sums = on_gpu ? d_exact_sums.cview() : CView(sums);
          args.q_counts = args.k_counts = on_gpu ? d_exact_counts.cview() : CView(counts);
          args.group = 1;
          args.top_blocks = top_blocks;
          args.out = out;
          return backend->BlockSparseIndex(args);
        }
        VerticalSlashIndexArgs args;
        args.tiles = on_gpu ? d_tiles.cview() : CView(tiles);
        args.runs = on_gpu ? d_runs.cview() : CView(runs);
        args.columns = on_gpu ? d_columns.cview() : CView(columns);
        args.diagonals = on_gpu ? d_diagonals.cview() : CView(diagonals);
        args.out = out;
        return backend->VerticalSlashIndex(args);
      };
      auto to_host = [&](ConstTensorView t) {
        if (on_gpu) return Download(t);
        HostTensor h(t.dtype, t.shape);
        if (t.NumBytes() > 0) std::memcpy(h.view().data, t.data, t.NumBytes());
        return h;
      };
      auto offsets = backend->Allocate(DType::kI64, {2 * 16 + 1});
      auto column_offsets = backend->Allocate(DType::kI64, {2 * 16 + 1});
      ASSERT_TRUE(build({offsets->view(),
                         {nullptr, DType::kI64, {0, 3}},
                         column_offsets->view(),
                         {nullptr, DType::kI64, {0, 2}}})
                      .ok());
      const int64_t n_ranges = to_host(offsets->cview()).data<int64_t>()[32];
      const int64_t n_columns = to_host(column_offsets->cview()).data<int64_t>()[32];
      auto ranges = backend->Allocate(DType::kI64, {n_ranges, 3});
      auto cols = backend->Allocate(DType::kI64, {n_columns, 2});
      ASSERT_TRUE(
          build({offsets->view(), ranges->view(), column_offsets->view(), cols->view()}).ok());
      for (ConstTensorView t :
           {offsets->cview(), column_offsets->cview(), ranges->cview(), cols->cview()})
        results.push_back(to_host(t));
    }
    for (size_t i = 0; i < 4; ++i)
      EXPECT_TRUE(testing::SameElementBytes(results[4 + i], results[i]))
          << (block_sparse ? "block-sparse " : "vertical-slash ") << i;
  }
}

// (a): a copy queued after a kernel sees the kernel's result. The kernel is slow (a gather that
// reads 128 MiB of page-locked host memory across PCIe); a copy not ordered after it would read
// the poison it overwrites.
TEST_F(CudaBackendOpsTest, CopyAfterComputeSeesTheKernelsResult) {
  BackendTensor source = PinnedPattern(kRows, kWidth, 0);
  BackendTensor index = Index(Reversed(kRows));
  BackendTensor dst = Filled(kRows, kWidth, -7);
  auto out = gpu_->AllocateHost(DType::kI32, {kRows, kWidth});
  ASSERT_TRUE(out.ok());
  std::fill_n(out->view().as<int32_t>(), kRows * kWidth, -9);
  ASSERT_TRUE(gpu_->Synchronize().ok());

  ASSERT_TRUE(gpu_->GatherRows({source.cview(), index.cview(), dst.view()}).ok());
  auto event = gpu_->StartCopy(dst.cview(), out->view(), CopyOrder::kAfterCompute);
  ASSERT_TRUE(event.ok()) << event.status().ToString();
  ASSERT_TRUE(gpu_->WaitCopy(*event).ok());
  auto done = gpu_->CopyDone(*event);
  ASSERT_TRUE(done.ok() && *done);
  const int32_t* o = out->view().as<int32_t>();
  for (int64_t r = 0; r < kRows; r += 997)
    for (int64_t c = 0; c < kWidth; c += 31)
      ASSERT_EQ(o[r * kWidth + c], (kRows - 1 - r) * kWidth + c) << r << "," << c;
  EXPECT_EQ(o[kRows * kWidth - 1], kWidth - 1);
}

// (b): compute made to wait for a host -> device copy sees the copied data (without the wait the
// gather would read the poison still in `staged`).
TEST_F(CudaBackendOpsTest, ComputeWaitingForACopySeesTheData) {
  BackendTensor source = PinnedPattern(kRows, kWidth, 5);
  BackendTensor staged = Filled(kRows, kWidth, -7);
  BackendTensor result = Filled(kRows, kWidth, -8);
  BackendTensor index = Index(Reversed(kRows));
  ASSERT_TRUE(gpu_->Synchronize().ok());

  auto event = gpu_->StartCopy(source.cview(), staged.view(), CopyOrder::kNow);
  ASSERT_TRUE(event.ok()) << event.status().ToString();
  ASSERT_TRUE(gpu_->ComputeWaitFor(*event).ok());
  ASSERT_TRUE(gpu_->GatherRows({staged.cview(), index.cview(), result.view()}).ok());
  const HostTensor got = Download(result.cview());
  for (int64_t r = 0; r < kRows; r += 991)
    for (int64_t c = 0; c < kWidth; c += 29)
      ASSERT_EQ(got.data<int32_t>()[r * kWidth + c], 5 + (kRows - 1 - r) * kWidth + c);
}

// The rule for a copy's source: compute that overwrites it after ComputeWaitFor leaves the copy
// the old contents (the layer-K/V-to-host pattern with a reused device buffer).
TEST_F(CudaBackendOpsTest, SourceOverwrittenAfterComputeWaitForStaysIntactForTheCopy) {
  BackendTensor before = PinnedPattern(kRows, kWidth, 0);
  BackendTensor after = PinnedPattern(kRows, kWidth, 1000);
  BackendTensor buffer = Filled(kRows, kWidth, 0);
  BackendTensor index = Index(Reversed(kRows));
  ASSERT_TRUE(gpu_->CopyFromHost(before.cview(), buffer.view()).ok());
  auto out = gpu_->AllocateHost(DType::kI32, {kRows, kWidth});
  ASSERT_TRUE(out.ok());
  ASSERT_TRUE(gpu_->Synchronize().ok());

  auto event = gpu_->StartCopy(buffer.cview(), out->view(), CopyOrder::kAfterCompute);
  ASSERT_TRUE(event.ok());
  ASSERT_TRUE(gpu_->ComputeWaitFor(*event).ok());
  ASSERT_TRUE(gpu_->GatherRows({after.cview(), index.cview(), buffer.view()}).ok());
  ASSERT_TRUE(gpu_->WaitCopy(*event).ok());
  EXPECT_EQ(std::memcmp(out->view().data, before.view().data, out->NumBytes()), 0);
  const HostTensor now = Download(buffer.cview());
  EXPECT_EQ(now.data<int32_t>()[0], 1000 + (kRows - 1) * kWidth);
}

// A large copy is still running after compute queued behind it was synchronised: Synchronize and
// StartCopy wait for the compute stream only, so compute and copies can overlap.
TEST_F(CudaBackendOpsTest, CopiesRunBesideCompute) {
  const int64_t rows = 4 * kRows;  // 512 MiB: tens of milliseconds across PCIe
  BackendTensor source = PinnedPattern(rows, kWidth, 0);
  BackendTensor target = Filled(rows, kWidth, 0);
  BackendTensor small_src = Filled(64, 16, 3), small_dst = Filled(64, 16, 0);
  BackendTensor index = Index(Reversed(64));
  ASSERT_TRUE(gpu_->Synchronize().ok());

  auto event = gpu_->StartCopy(source.cview(), target.view(), CopyOrder::kNow);
  ASSERT_TRUE(event.ok());
  auto started = gpu_->CopyDone(*event);
  ASSERT_TRUE(started.ok());
  EXPECT_FALSE(*started) << "StartCopy waited for its copy";
  ASSERT_TRUE(gpu_->GatherRows({small_src.cview(), index.cview(), small_dst.view()}).ok());
  ASSERT_TRUE(gpu_->Synchronize().ok());
  auto after_compute = gpu_->CopyDone(*event);
  ASSERT_TRUE(after_compute.ok());
  EXPECT_FALSE(*after_compute) << "compute's Synchronize waited for the copy queue";
  ASSERT_TRUE(gpu_->WaitCopy(*event).ok());
  const HostTensor got = Download(target.cview());
  EXPECT_EQ(got.data<int32_t>()[rows * kWidth - 1], rows * kWidth - 1);
}

// (b) with the gather itself on the copy queue: selected rows of a page-locked host tier packed
// into device memory, then consumed by compute.
TEST_F(CudaBackendOpsTest, GatherFromHostTierOnTheCopyQueue) {
  const int64_t n = 5000, kv_heads = 4, d = 128;
  HostTensor k = RandomTensor(DType::kBF16, {n * kv_heads, d}, 9);
  auto tier = gpu_->AllocateHost(DType::kBF16, {n * kv_heads, d});
  ASSERT_TRUE(tier.ok());
  std::memcpy(tier->view().data, k.view().data, k.NumBytes());
  std::vector<int64_t> rows;
  std::mt19937_64 rng(10);
  for (int i = 0; i < 2048; ++i) rows.push_back(static_cast<int64_t>(rng() % (n * kv_heads)));
  BackendTensor index = Index(rows);
  auto packed = gpu_->Allocate(DType::kBF16, {2048, d});
  auto widened = gpu_->Allocate(DType::kF32, {2048, d});
  ASSERT_TRUE(packed.ok() && widened.ok());

  auto event = gpu_->StartGatherRows({tier->cview(), index.cview(), packed->view()},
                                     CopyOrder::kAfterCompute);
  ASSERT_TRUE(event.ok()) << event.status().ToString();
  ASSERT_TRUE(gpu_->ComputeWaitFor(*event).ok());
  ASSERT_TRUE(gpu_->Convert(packed->cview(), widened->view()).ok());
  const HostTensor got = Download(widened->cview());
  const std::vector<float> kf = testing::ToFloats(k);
  for (size_t i = 0; i < rows.size(); ++i)
    for (int64_t c = 0; c < d; ++c)
      ASSERT_EQ(got.data<float>()[i * d + c], kf[rows[i] * d + c]) << i << "," << c;
  EXPECT_TRUE(gpu_->WaitCopy(*event).ok());
}

// A host tier of several hundred MiB takes the mapped-and-registered path: the copy queue gathers
// from it and copies into it.
TEST_F(CudaBackendOpsTest, LargeHostTierIsPinnedAndMapped) {
  const int64_t rows = 80000, width = 1024;  // 312.5 MiB of I32
  BackendTensor tier = PinnedPattern(rows, width, 0);
  const std::vector<int64_t> picked = {rows - 1, 0, 41234, 7, rows / 2};
  BackendTensor index = Index(picked);
  BackendTensor packed = Filled(static_cast<int64_t>(picked.size()), width, -1);
  auto gathered = gpu_->StartGatherRows({tier.cview(), index.cview(), packed.view()},
                                        CopyOrder::kAfterCompute);
  ASSERT_TRUE(gathered.ok()) << gathered.status().ToString();
  ASSERT_TRUE(gpu_->WaitCopy(*gathered).ok());
  const HostTensor got = Download(packed.cview());
  for (size_t i = 0; i < picked.size(); ++i)
    for (int64_t c = 0; c < width; c += 97)
      ASSERT_EQ(got.data<int32_t>()[static_cast<int64_t>(i) * width + c],
                static_cast<int32_t>(picked[i] * width + c));
  BackendTensor source = Filled(3, width, 5);
  auto copied = gpu_->StartCopy(source.cview(), SliceRows(tier.view(), rows - 3, 3),
                                CopyOrder::kAfterCompute);
  ASSERT_TRUE(copied.ok()) << copied.status().ToString();
  ASSERT_TRUE(gpu_->WaitCopy(*copied).ok());
  const int32_t* host = tier.view().as<int32_t>();
  EXPECT_EQ(host[(rows - 3) * width], 5);
  EXPECT_EQ(host[rows * width - 1], 5);
  EXPECT_EQ(host[(rows - 4) * width], static_cast<int32_t>((rows - 4) * width));
}

// A host-to-host copy large enough to run on host threads keeps the queue's order: it copies
// what a device-to-host copy queued before it wrote, and a device copy queued after it reads
// what it wrote.
TEST_F(CudaBackendOpsTest, LargeHostToHostCopyKeepsTheQueuesOrder) {
  const int64_t rows = 40000, width = 1024;  // 156 MiB of I32: several host threads
  BackendTensor from = PinnedPattern(rows, width, 0);
  BackendTensor to = PinnedPattern(rows, width, 1);
  BackendTensor source = Filled(2, width, 9);
  auto into_from = gpu_->StartCopy(source.cview(), SliceRows(from.view(), rows - 2, 2),
                                   CopyOrder::kAfterCompute);
  ASSERT_TRUE(into_from.ok()) << into_from.status().ToString();
  auto across = gpu_->StartCopy(from.cview(), to.view(), CopyOrder::kNow);
  ASSERT_TRUE(across.ok()) << across.status().ToString();
  BackendTensor back = Filled(2, width, -1);
  auto out = gpu_->StartCopy(SliceRows(to.cview(), rows - 3, 2), back.view(), CopyOrder::kNow);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_TRUE(gpu_->WaitCopy(*out).ok());
  const int32_t* host = to.view().as<int32_t>();
  for (int64_t r = 0; r < rows - 2; r += 997)
    ASSERT_EQ(host[r * width + 3], static_cast<int32_t>(r * width + 3)) << r;
  EXPECT_EQ(host[(rows - 2) * width], 9);
  EXPECT_EQ(host[rows * width - 1], 9);
  const HostTensor got = Download(back.cview());
  EXPECT_EQ(got.data<int32_t>()[0], static_cast<int32_t>((rows - 3) * width));
  EXPECT_EQ(got.data<int32_t>()[width], 9);
}

TEST_F(CudaBackendOpsTest, BadGatherIndexIsReportedBySynchronizeAndWaitCopy) {
  BackendTensor src = Filled(8, 4, 1), dst = Filled(3, 4, 9);
  BackendTensor index = Index({2, 8, 0});
  ASSERT_TRUE(gpu_->GatherRows({src.cview(), index.cview(), dst.view()}).ok());
  EXPECT_EQ(gpu_->Synchronize().code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(gpu_->Synchronize().ok()) << "the report is cleared once returned";
  const HostTensor got = Download(dst.cview());
  EXPECT_EQ(got.data<int32_t>()[0], 1);
  EXPECT_EQ(got.data<int32_t>()[4], 0);  // the bad entry's row: zeros

  auto event = gpu_->StartGatherRows({src.cview(), index.cview(), dst.view()}, CopyOrder::kNow);
  ASSERT_TRUE(event.ok());
  EXPECT_EQ(gpu_->WaitCopy(*event).code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(gpu_->WaitCopy(*event).ok());
}

TEST_F(CudaBackendOpsTest, PageableMemoryAndForeignEventsAreRefused) {
  std::vector<int32_t> pageable(64, 1);
  BackendTensor device = Filled(8, 8, 0);
  const ConstTensorView host{pageable.data(), DType::kI32, {8, 8}};
  EXPECT_EQ(gpu_->StartCopy(host, device.view(), CopyOrder::kNow).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(
      gpu_->StartCopy(device.cview(), {pageable.data(), DType::kI32, {8, 8}}, CopyOrder::kNow)
          .ok());
  EXPECT_EQ(gpu_->WaitCopy(CopyEvent{12345}).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(gpu_->WaitCopy(CopyEvent{}).ok());
}

// Hundreds of copies in flight (device -> device and both host directions); events complete in
// order and are recycled; waiting on an old, retired event is immediate.
TEST_F(CudaBackendOpsTest, ManyCopiesInFlight) {
  BackendTensor pinned = PinnedPattern(64, 256, 0);
  std::vector<BackendTensor> device;
  for (int i = 0; i < 300; ++i) device.push_back(Filled(64, 256, -1));
  ASSERT_TRUE(gpu_->Synchronize().ok());
  std::vector<CopyEvent> events;
  for (int i = 0; i < 300; ++i) {
    auto e = gpu_->StartCopy(pinned.cview(), device[static_cast<size_t>(i)].view(),
                             i % 2 ? CopyOrder::kNow : CopyOrder::kAfterCompute);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    if (!events.empty()) {
      EXPECT_GT(e->sequence, events.back().sequence);
    }
    events.push_back(*e);
  }
  auto out = gpu_->Allocate(DType::kI32, {64, 256});
  auto last = gpu_->StartCopy(device[150].cview(), out->view(), CopyOrder::kNow);
  ASSERT_TRUE(last.ok());
  ASSERT_TRUE(gpu_->WaitCopy(*last).ok());
  for (const CopyEvent& e : events) {
    auto done = gpu_->CopyDone(e);
    ASSERT_TRUE(done.ok());
    EXPECT_TRUE(*done) << "copy " << e.sequence << " finished before a later one";
    EXPECT_TRUE(gpu_->ComputeWaitFor(e).ok());
  }
  const HostTensor got = Download(out->cview());
  EXPECT_EQ(got.data<int32_t>()[64 * 256 - 1], 64 * 256 - 1);
}

}  // namespace
}  // namespace millipede
