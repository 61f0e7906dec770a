// The KV stores on the GPU backend: the streaming store's compaction (device copies through the
// spare rows) and the host store's copies out of its staging buffer and packed gathers on the
// copy queue give what the CPU backend gives.
#include <gtest/gtest.h>

#include <vector>

#include "tests/kernels/op_harness.h"
#include "worker/backend/backend_factory.h"
#include "worker/kv/device_kv_store.h"
#include "worker/kv/host_kv_store.h"
#include "worker/kv/streaming_kv_store.h"

namespace millipede {
namespace {

constexpr KvLayout kLayout{2, 64, DType::kBF16};
constexpr int64_t kRow = 2 * 64;  // elements of one row of K (or V)

class KvStoreCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::HaveGpu()) GTEST_SKIP() << "no CUDA device";
    auto b = CreateBackend(BackendKind::kCuda, 0);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    backend_ = std::move(b).value();
  }
  // Rows whose K holds the position and V minus it (exact in bf16 below 256).
  void WriteStep(KvStore& s, TokenRange r) {
    std::vector<float> k(static_cast<size_t>(r.size() * kRow)), v(k.size());
    for (int64_t p = r.begin; p < r.end; ++p)
      for (int64_t i = 0; i < kRow; ++i) {
        k[(p - r.begin) * kRow + i] = static_cast<float>(p);
        v[(p - r.begin) * kRow + i] = -static_cast<float>(p);
      }
    auto rows = s.StepRows(0, r.size());
    ASSERT_TRUE(rows.ok()) << rows.status().ToString();
    const Shape shape{r.size(), 2, 64};
    auto fk = backend_->Allocate(DType::kF32, shape), fv = backend_->Allocate(DType::kF32, shape);
    ASSERT_TRUE(fk.ok() && fv.ok());
    ASSERT_TRUE(backend_->CopyFromHost({k.data(), DType::kF32, shape}, fk->view()).ok());
    ASSERT_TRUE(backend_->CopyFromHost({v.data(), DType::kF32, shape}, fv->view()).ok());
    ASSERT_TRUE(backend_->Convert(fk->cview(), rows->k).ok());
    ASSERT_TRUE(backend_->Convert(fv->cview(), rows->v).ok());
  }
  // Position held by each row of a device view (K's first element; V checked against it).
  std::vector<int64_t> Positions(ConstKvRows rows) {
    const int64_t n = rows.k.dim(0);
    std::vector<float> k(static_cast<size_t>(n * kRow)), v(k.size());
    auto fk = backend_->Allocate(DType::kF32, rows.k.shape);
    auto fv = backend_->Allocate(DType::kF32, rows.v.shape);
    EXPECT_TRUE(fk.ok() && fv.ok());
    EXPECT_TRUE(backend_->Convert(rows.k, fk->view()).ok());
    EXPECT_TRUE(backend_->Convert(rows.v, fv->view()).ok());
    EXPECT_TRUE(backend_->CopyToHost(fk->cview(), {k.data(), DType::kF32, rows.k.shape}).ok());
    EXPECT_TRUE(backend_->CopyToHost(fv->cview(), {v.data(), DType::kF32, rows.v.shape}).ok());
    std::vector<int64_t> out;
    for (int64_t row = 0; row < n; ++row) {
      EXPECT_EQ(v[row * kRow + kRow - 1], -k[row * kRow]);
      out.push_back(static_cast<int64_t>(k[row * kRow + 3]));
    }
    return out;
  }
  std::unique_ptr<Backend> backend_;
};

std::vector<int64_t> Expand(const std::vector<TokenRange>& ranges) {
  std::vector<int64_t> out;
  for (const TokenRange& r : ranges)
    for (int64_t p = r.begin; p < r.end; ++p) out.push_back(p);
  return out;
}

// The prefix cache's shared blocks on the GPU (CUDA virtual memory): a store created sharing a
// kept one maps its whole chunks (16384 rows of 2 x 64 bf16 fill whole 2 MiB pages), takes GPU
// memory only for the rest, holds the same rows, and keeps them once the kept store is gone.
TEST_F(KvStoreCudaTest, DeviceStoresShareWholeChunks) {
  if (backend_->page_bytes() == 0) GTEST_SKIP() << "no virtual memory management";
  constexpr int64_t kCapacity = 40000, kPrefix = 33000;
  auto src = DeviceKvStore::Create(*backend_, kLayout, kCapacity);
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  WriteStep(**src, {0, kPrefix});
  ASSERT_TRUE((*src)->Commit(std::vector<TokenRange>{{0, kPrefix}}, kPrefix).ok());
  const int64_t shared = DeviceKvStore::ShareableRows(**src, kPrefix);
  EXPECT_EQ(shared, 32768);
  const auto bytes = [&](const KvStore& s) {
    const ConstKvRows rows = *s.Rows(0);
    std::vector<char> host(rows.k.NumBytes() + rows.v.NumBytes());
    EXPECT_TRUE(backend_->CopyToHost(rows.k, {host.data(), rows.k.dtype, rows.k.shape}).ok());
    EXPECT_TRUE(
        backend_->CopyToHost(rows.v, {host.data() + rows.k.NumBytes(), rows.v.dtype, rows.v.shape})
            .ok());
    return host;
  };
  const std::vector<char> want = bytes(**src);
  ASSERT_TRUE(backend_->Synchronize().ok());
  const int64_t free_before = backend_->Memory()->free_bytes;
  auto dst = DeviceKvStore::Create(*backend_, kLayout, kCapacity, src->get(), shared);
  ASSERT_TRUE(dst.ok()) << dst.status().ToString();
  const int64_t taken = free_before - backend_->Memory()->free_bytes;
  EXPECT_LE(taken, DeviceKvStore::BytesFor(kLayout, kCapacity - shared) + (4 << 20));
  ASSERT_TRUE(
      (*dst)->RestoreFrom(*backend_, **src, std::vector<TokenRange>{{0, kPrefix}}, kPrefix).ok());
  EXPECT_EQ(bytes(**dst), want);
  EXPECT_TRUE((*src)->SharedFrom(0) && !(*src)->SharedFrom(shared));
  src->reset();
  EXPECT_EQ(bytes(**dst), want);
  WriteStep(**dst, {kPrefix, kPrefix + 10});
  ASSERT_TRUE((*dst)->Commit(std::vector<TokenRange>{{kPrefix, kPrefix + 10}}, kPrefix + 10).ok());
  EXPECT_EQ((*dst)->held_rows(), kPrefix + 10);
}

TEST_F(KvStoreCudaTest, StreamingStoreCompactsOnTheDevice) {
  const KvRetention r{3, 9};
  auto store = StreamingKvStore::Create(*backend_, kLayout, r, 20);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  KvStore& s = **store;
  std::vector<TokenRange> all;
  int64_t length = 0;
  for (int64_t n : {20, 1, 5, 1, 1, 17, 1, 1, 2}) {
    const TokenRange step{length, length + n};
    WriteStep(s, step);
    length += n;
    ASSERT_TRUE(s.Commit(std::vector<TokenRange>{step}, length).ok());
    AppendRange(&all, step);
    EXPECT_EQ(Positions(*s.Rows(0)), Expand(r.Kept(all, length))) << "length " << length;
  }
}

TEST_F(KvStoreCudaTest, HostStoreCopiesOutBehindComputeAndGathers) {
  auto store = HostKvStore::Create(*backend_, kLayout, 64, 16);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  HostKvStore& s = **store;
  int64_t length = 0;
  for (int64_t n : {16, 16, 3, 1, 1}) {
    WriteStep(s, {length, length + n});  // waits for the previous step's copy out of staging
    ASSERT_TRUE(s.Commit(std::vector<TokenRange>{{length, length + n}}, length + n).ok());
    length += n;
  }
  ASSERT_TRUE(s.WaitForWrites().ok());
  ASSERT_TRUE(backend_->Synchronize().ok());
  EXPECT_EQ(Positions(*s.Rows(0)), Expand({{0, length}}));  // mapped host memory, read on device
  const std::vector<int32_t> rows = {36, 0, 17, 5};
  auto index = backend_->Allocate(DType::kI32, Shape{4});
  auto k = backend_->Allocate(DType::kBF16, Shape{4, 2, 64});
  auto v = backend_->Allocate(DType::kBF16, Shape{4, 2, 64});
  ASSERT_TRUE(index.ok() && k.ok() && v.ok());
  ASSERT_TRUE(backend_->CopyFromHost({rows.data(), DType::kI32, Shape{4}}, index->view()).ok());
  auto event = s.StartGather(index->cview(), {k->view(), v->view()});
  ASSERT_TRUE(event.ok()) << event.status().ToString();
  ASSERT_TRUE(backend_->ComputeWaitFor(*event).ok());
  EXPECT_EQ(Positions({k->cview(), v->cview()}), (std::vector<int64_t>{36, 0, 17, 5}));
}

}  // namespace
}  // namespace millipede
