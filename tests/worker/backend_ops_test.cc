// The CPU backend's selection ops, host allocation and copy queue: the ops are the kernels'
// references, copies run when started and their events are complete at once, events it never
// issued are refused, a gather's bad index fails its call; sparse attention checks its index.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "worker/backend/cpu_backend.h"

namespace millipede {
namespace {

TEST(CpuBackendOpsTest, AllocateHostGivesWritableAlignedMemory) {
  auto backend = CreateCpuBackend();
  auto t = backend->AllocateHost(DType::kBF16, {3, 5});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->NumBytes(), 30u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t->view().data) % 64, 0u);
  std::memset(t->view().data, 0x5a, t->NumBytes());
  EXPECT_EQ(static_cast<unsigned char*>(t->view().data)[29], 0x5a);
  EXPECT_FALSE(backend->AllocateHost(DType::kF32, {-1, 2}).ok());
}

TEST(CpuBackendOpsTest, CopiesRunAtOnceAndTheirEventsAreComplete) {
  auto backend = CreateCpuBackend();
  auto src = backend->AllocateHost(DType::kI32, {4, 2});
  auto dst = backend->Allocate(DType::kI32, {8});
  ASSERT_TRUE(src.ok() && dst.ok());
  std::iota(src->view().as<int32_t>(), src->view().as<int32_t>() + 8, 10);
  for (CopyOrder order : {CopyOrder::kAfterCompute, CopyOrder::kNow}) {
    std::memset(dst->view().data, 0, dst->NumBytes());
    auto event = backend->StartCopy(src->cview(), dst->view(), order);
    ASSERT_TRUE(event.ok()) << event.status().ToString();
    EXPECT_EQ(dst->view().as<int32_t>()[7], 17);  // already there: no wait needed
    auto done = backend->CopyDone(*event);
    ASSERT_TRUE(done.ok());
    EXPECT_TRUE(*done);
    EXPECT_TRUE(backend->WaitCopy(*event).ok());
    EXPECT_TRUE(backend->ComputeWaitFor(*event).ok());
  }
  // Events are numbered in order; the empty event is complete; one never issued is refused.
  auto a = backend->StartCopy(src->cview(), dst->view(), CopyOrder::kNow);
  auto b = backend->StartCopy(src->cview(), dst->view(), CopyOrder::kNow);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_LT(a->sequence, b->sequence);
  EXPECT_TRUE(backend->WaitCopy(CopyEvent{}).ok());
  const CopyEvent never{b->sequence + 1};
  EXPECT_EQ(backend->WaitCopy(never).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(backend->CopyDone(never).ok());
  EXPECT_FALSE(backend->ComputeWaitFor(never).ok());
}

TEST(CpuBackendOpsTest, CopyChecksDtypeAndSize) {
  auto backend = CreateCpuBackend();
  auto a = backend->Allocate(DType::kF32, {4});
  auto b = backend->Allocate(DType::kF32, {5});
  auto c = backend->Allocate(DType::kI32, {4});
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_FALSE(backend->StartCopy(a->cview(), b->view(), CopyOrder::kNow).ok());
  EXPECT_FALSE(backend->StartCopy(a->cview(), c->view(), CopyOrder::kNow).ok());
}

TEST(CpuBackendOpsTest, GatherAsACopyAndAsAnOp) {
  auto backend = CreateCpuBackend();
  auto src = backend->AllocateHost(DType::kF32, {4, 3});
  auto index = backend->Allocate(DType::kI64, {3});
  auto dst = backend->Allocate(DType::kF32, {3, 3});
  ASSERT_TRUE(src.ok() && index.ok() && dst.ok());
  std::iota(src->view().as<float>(), src->view().as<float>() + 12, 0.0f);
  const int64_t rows[] = {3, 0, 3};
  std::memcpy(index->view().data, rows, sizeof rows);
  const GatherRowsArgs args{src->cview(), index->cview(), dst->view()};
  auto event = backend->StartGatherRows(args, CopyOrder::kAfterCompute);
  ASSERT_TRUE(event.ok()) << event.status().ToString();
  EXPECT_TRUE(backend->WaitCopy(*event).ok());
  const std::vector<float> want{9, 10, 11, 0, 1, 2, 9, 10, 11};
  EXPECT_EQ(std::vector<float>(dst->view().as<float>(), dst->view().as<float>() + 9), want);
  std::memset(dst->view().data, 0, dst->NumBytes());
  ASSERT_TRUE(backend->GatherRows(args).ok());
  EXPECT_EQ(std::vector<float>(dst->view().as<float>(), dst->view().as<float>() + 9), want);
  index->view().as<int64_t>()[1] = 4;
  EXPECT_EQ(backend->GatherRows(args).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(backend->StartGatherRows(args, CopyOrder::kNow).status().code(),
            StatusCode::kOutOfRange);
}

TEST(CpuBackendOpsTest, SelectionOpsAreTheReferences) {
  auto backend = CreateCpuBackend();
  // Top-2 of [1, 3, 3, -1] and key scores of one query over two keys: exact references.
  const float row[] = {1, 3, 3, -1};
  int32_t index[2];
  float value[2];
  ASSERT_TRUE(backend
                  ->TopK({{row, DType::kF32, {1, 4}},
                          2,
                          {index, DType::kI32, {1, 2}},
                          {value, DType::kF32, {1, 2}}})
                  .ok());
  EXPECT_EQ(index[0], 1);
  EXPECT_EQ(index[1], 2);
  const float q[] = {1, 0}, k[] = {1, 0, 0, 0}, lse[] = {0};
  const int64_t q_pos[] = {1}, k_pos[] = {0, 1};
  float score[2];
  ASSERT_TRUE(backend
                  ->KeyScores({{q, DType::kF32, {1, 1, 2}},
                               {q_pos, DType::kI64, {1}},
                               {k, DType::kF32, {2, 1, 2}},
                               {k_pos, DType::kI64, {2}},
                               {lse, DType::kF32, {1, 1}},
                               1.0f,
                               {score, DType::kF32, {1, 2}},
                               {}})
                  .ok());
  EXPECT_FLOAT_EQ(score[0], std::exp(1.0f));
  EXPECT_FLOAT_EQ(score[1], 1.0f);
}

// The sparse index ops of the CPU backend are the references: one tile, one run, two passes.
TEST(CpuBackendOpsTest, SparseIndexOpsAreTheReferences) {
  auto backend = CreateCpuBackend();
  const int64_t tiles[] = {0, 64, 64}, runs[] = {0, 128, 0};
  const int64_t columns[] = {3}, diagonals[] = {0};
  int64_t range_offsets[2], column_offsets[2], ranges[3], column_rows[2];
  VerticalSlashIndexArgs vs;
  vs.tiles = {tiles, DType::kI64, {1, 3}};
  vs.runs = {runs, DType::kI64, {1, 3}};
  vs.columns = {columns, DType::kI64, {1, 1}};
  vs.diagonals = {diagonals, DType::kI64, {1, 1}};
  vs.out = {{range_offsets, DType::kI64, {2}},
            {nullptr, DType::kI64, {0, 3}},
            {column_offsets, DType::kI64, {2}},
            {nullptr, DType::kI64, {0, 2}}};
  ASSERT_TRUE(backend->VerticalSlashIndex(vs).ok());
  EXPECT_EQ(range_offsets[1], 1);
  EXPECT_EQ(column_offsets[1], 1);
  vs.out.ranges = {ranges, DType::kI64, {1, 3}};
  vs.out.columns = {column_rows, DType::kI64, {1, 2}};
  ASSERT_TRUE(backend->VerticalSlashIndex(vs).ok());
  EXPECT_EQ((std::vector<int64_t>(ranges, ranges + 3)), (std::vector<int64_t>{64, 128, 64}));
  EXPECT_EQ((std::vector<int64_t>(column_rows, column_rows + 2)), (std::vector<int64_t>{3, 3}));

  // Block sums of 128 rows (x = 1) in two blocks, then the block-sparse index of the tile.
  std::vector<float> x(128, 1.0f);
  float sums[2], counts[2];
  ASSERT_TRUE(backend
                  ->BlockSums({{x.data(), DType::kF32, {128, 1, 1}},
                               {runs, DType::kI64, {1, 3}},
                               64,
                               1,
                               {sums, DType::kF32, {2, 1, 1}},
                               {counts, DType::kF32, {2}}})
                  .ok());
  EXPECT_EQ(sums[1], 64.0f);
  EXPECT_EQ(counts[0], 64.0f);
  const int64_t top_blocks[] = {2};
  BlockSparseIndexArgs bs;
  bs.tiles = vs.tiles;
  bs.runs = vs.runs;
  bs.q_sums = bs.k_sums = {sums, DType::kF32, {2, 1, 1}};
  bs.q_counts = bs.k_counts = {counts, DType::kF32, {2}};
  bs.top_blocks = top_blocks;
  bs.out = {{range_offsets, DType::kI64, {2}},
            {ranges, DType::kI64, {1, 3}},
            {column_offsets, DType::kI64, {2}},
            {column_rows, DType::kI64, {0, 2}}};
  ASSERT_TRUE(backend->BlockSparseIndex(bs).ok());
  EXPECT_EQ((std::vector<int64_t>(ranges, ranges + 3)), (std::vector<int64_t>{0, 128, 0}));
  EXPECT_EQ(column_offsets[1], 0);
}

TEST(CpuBackendOpsTest, SparseAttentionChecksTheIndex) {
  auto backend = CreateCpuBackend();
  // One query at position 2 over keys 0 and 2 (key 1 left out): weights e^1 and e^0 on values
  // 1 and 0 (scale 1).
  const float q[] = {1, 0}, k[] = {1, 0, 5, 5, 0, 0}, v[] = {1, 1, 7, 7, 0, 0};
  const int64_t tiles[] = {0, 1, 2}, offsets[] = {0, 1}, ranges[] = {0, 1, 0}, columns[] = {2, 2};
  float o[2], lse[1];
  SparseAttentionArgs args{{q, DType::kF32, {1, 1, 2}},
                           {k, DType::kF32, {3, 1, 2}},
                           {v, DType::kF32, {3, 1, 2}},
                           {tiles, DType::kI64, {1, 3}},
                           {{offsets, DType::kI64, {2}},
                            {ranges, DType::kI64, {1, 3}},
                            {offsets, DType::kI64, {2}},
                            {columns, DType::kI64, {1, 2}}},
                           1.0f,
                           {o, DType::kF32, {1, 1, 2}},
                           {lse, DType::kF32, {1, 1}}};
  ASSERT_TRUE(backend->SparseAttention(args).ok());
  const float e = std::exp(1.0f);
  EXPECT_FLOAT_EQ(o[0], e / (e + 1));
  EXPECT_FLOAT_EQ(lse[0], std::log(e + 1));
  const int64_t bad_columns[] = {3, 2};
  args.index.columns.data = bad_columns;
  EXPECT_EQ(backend->SparseAttention(args).code(), StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace millipede
