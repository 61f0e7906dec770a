// KV stores: what each keeps, rows written and read back by position, constant size of the
// streaming store, and contract errors.
#include <gtest/gtest.h>

#include <vector>

#include "worker/backend/backend_factory.h"
#include "worker/kv/device_kv_store.h"
#include "worker/kv/host_kv_store.h"
#include "worker/kv/saved_kv_rows.h"
#include "worker/kv/streaming_kv_store.h"

namespace millipede {
namespace {

constexpr KvLayout kLayout{2, 4, DType::kF32};  // 2 KV heads, head_dim 4

std::unique_ptr<Backend> Cpu() { return std::move(CreateBackend(BackendKind::kCpu)).value(); }

// Writes rows whose every K element is the position and every V element minus it.
void WriteStep(KvStore& s, const std::vector<TokenRange>& step) {
  int64_t offset = 0;
  for (const TokenRange& r : step) {
    auto rows = s.StepRows(offset, r.size());
    ASSERT_TRUE(rows.ok()) << rows.status().ToString();
    float* k = rows->k.as<float>();
    float* v = rows->v.as<float>();
    for (int64_t p = r.begin; p < r.end; ++p)
      for (int64_t i = 0; i < 8; ++i) {
        k[(p - r.begin) * 8 + i] = static_cast<float>(p);
        v[(p - r.begin) * 8 + i] = -static_cast<float>(p);
      }
    offset += r.size();
  }
}

// The positions the store's rows hold, read from the data.
std::vector<int64_t> HeldPositions(const KvStore& s) {
  const ConstKvRows rows = *s.Rows(0);
  std::vector<int64_t> out;
  for (int64_t row = 0; row < rows.k.dim(0); ++row) {
    const float p = rows.k.as<const float>()[row * 8];
    EXPECT_EQ(rows.v.as<const float>()[row * 8 + 7], -p);
    out.push_back(static_cast<int64_t>(p));
  }
  return out;
}

std::vector<int64_t> Expand(const std::vector<TokenRange>& ranges) {
  std::vector<int64_t> out;
  for (const TokenRange& r : ranges)
    for (int64_t p = r.begin; p < r.end; ++p) out.push_back(p);
  return out;
}

TEST(KvRetentionTest, KeepsSinksAndTheNextQuerysWindow) {
  const KvRetention all;
  EXPECT_TRUE(all.KeepsAll());
  EXPECT_EQ(Expand(all.Kept(std::vector<TokenRange>{{0, 5}}, 5)), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  const KvRetention r{2, 3};  // sinks 0, 1; a query at 10 sees 8, 9 (and itself)
  EXPECT_EQ(Expand(r.Kept(std::vector<TokenRange>{{0, 10}}, 10)), (std::vector<int64_t>{0, 1, 8, 9}));
  // Only the rank's own rows: neither sinks nor window here.
  EXPECT_TRUE(r.Kept(std::vector<TokenRange>{{3, 6}}, 10).empty());
  EXPECT_EQ(r.KeptRows(std::vector<TokenRange>{{1, 4}, {7, 10}}, 10), 3);  // 1, 8, 9
  EXPECT_TRUE(r.Keeps(9, 10) && !r.Keeps(7, 10) && r.Keeps(1, 1000));
}

TEST(DeviceKvStoreTest, KeepsEveryRowInOrder) {
  auto backend = Cpu();
  auto store = DeviceKvStore::Create(*backend, kLayout, 10);
  ASSERT_TRUE(store.ok());
  KvStore& s = **store;
  WriteStep(s, {{0, 3}, {6, 8}});
  ASSERT_TRUE(s.Commit(std::vector<TokenRange>{{0, 3}, {6, 8}}, 8).ok());
  WriteStep(s, {{9, 10}});
  EXPECT_EQ(s.Rows(1)->k.dim(0), 6);  // held and the step's row
  ASSERT_TRUE(s.Commit(std::vector<TokenRange>{{9, 10}}, 10).ok());
  EXPECT_EQ(HeldPositions(s), (std::vector<int64_t>{0, 1, 2, 6, 7, 9}));
  EXPECT_EQ(s.held_rows(), 6);
  EXPECT_EQ(s.NumBytes(), DeviceKvStore::BytesFor(kLayout, 10));
  // Beyond the capacity, and positions out of order, are refused.
  EXPECT_FALSE(s.StepRows(0, 5).ok());
  EXPECT_FALSE(s.Commit(std::vector<TokenRange>{{4, 5}}, 11).ok());
}

// The prefix cache's shared blocks: a store created sharing a kept one maps that store's whole
// chunks before the prefix (the same memory), copies the rest of it, and keeps those chunks once
// the kept store is gone; the kept store may not forget rows whose memory is shared.
TEST(DeviceKvStoreTest, SharesWholeChunksOfAKeptStore) {
  auto backend = Cpu();
  // 2 heads of 4 floats: 256 rows fill whole 4 KiB pages, so chunks are 256 rows.
  auto src = DeviceKvStore::Create(*backend, kLayout, 1024);
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  WriteStep(**src, {{0, 700}});
  ASSERT_TRUE((*src)->Commit(std::vector<TokenRange>{{0, 700}}, 700).ok());
  EXPECT_EQ(DeviceKvStore::ShareableRows(**src, 600), 512);
  EXPECT_EQ(DeviceKvStore::ShareableRows(**src, 255), 0);
  EXPECT_FALSE(DeviceKvStore::Create(*backend, kLayout, 800, src->get(), 300).ok());
  EXPECT_FALSE(DeviceKvStore::Create(*backend, kLayout, 800, src->get(), 768).ok());

  auto dst = DeviceKvStore::Create(*backend, kLayout, 800, src->get(), 512);
  ASSERT_TRUE(dst.ok()) << dst.status().ToString();
  EXPECT_EQ((*dst)->shared_rows(), 512);
  const std::vector<TokenRange> prefix{{0, 600}};
  ASSERT_TRUE((*dst)->RestoreFrom(*backend, **src, prefix, 600).ok());
  EXPECT_EQ(HeldPositions(**dst), Expand(prefix));
  // One memory: a write to the kept store's first chunks is seen in the new one, not beyond.
  float* kept_k = (*src)->FixedRows(1024)->k.as<float>();
  kept_k[5 * 8] = 1234.0f;
  kept_k[550 * 8] = 1234.0f;
  EXPECT_EQ((*dst)->Rows(0)->k.as<const float>()[5 * 8], 1234.0f);
  EXPECT_EQ((*dst)->Rows(0)->k.as<const float>()[550 * 8], 550.0f);
  kept_k[5 * 8] = 5.0f;
  kept_k[550 * 8] = 550.0f;
  EXPECT_TRUE((*src)->SharedFrom(0) && (*dst)->SharedFrom(511));
  EXPECT_FALSE((*src)->SharedFrom(512) || (*dst)->SharedFrom(512));
  // Forgetting rows in a shared chunk would write over the new store's prefix.
  EXPECT_EQ((*src)->Truncate(std::vector<TokenRange>{{0, 300}}, 300).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_TRUE((*src)->Truncate(std::vector<TokenRange>{{0, 650}}, 650).ok());
  src->reset();
  EXPECT_FALSE((*dst)->SharedFrom(0));
  WriteStep(**dst, {{600, 610}});
  ASSERT_TRUE((*dst)->Commit(std::vector<TokenRange>{{600, 610}}, 610).ok());
  EXPECT_EQ(HeldPositions(**dst), Expand({{0, 610}}));
}

TEST(StreamingKvStoreTest, HoldsSinksAndWindowAtConstantSize) {
  auto backend = Cpu();
  const KvRetention r{3, 5};
  auto store = StreamingKvStore::Create(*backend, kLayout, r, 7);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  KvStore& s = **store;
  const int64_t bytes = s.NumBytes();
  std::vector<TokenRange> all;
  int64_t length = 0;
  // Steps of 7, 1, 4, 1, 1, ... tokens (a prefill in chunks, then decode).
  for (int64_t n : {7, 1, 4, 1, 1, 6, 1, 1, 1, 2, 7, 1}) {
    const std::vector<TokenRange> step = {{length, length + n}};
    WriteStep(s, step);
    // During the step: what was held, then the step's rows.
    EXPECT_EQ(s.Rows(n)->k.dim(0), s.held_rows() + n);
    length += n;
    ASSERT_TRUE(s.Commit(step, length).ok());
    AppendRange(&all, step[0]);
    EXPECT_EQ(HeldPositions(s), Expand(r.Kept(all, length))) << "length " << length;
    EXPECT_EQ(Expand(s.held_ranges()), Expand(r.Kept(all, length)));
    EXPECT_EQ(s.NumBytes(), bytes);
  }
  EXPECT_EQ(bytes, StreamingKvStore::BytesFor(kLayout, r, 7));
  // A step that does not fit beside the held rows is refused before anything is written.
  EXPECT_FALSE(s.StepRows(0, 16).ok());  // more than its rows
}

TEST(StreamingKvStoreTest, ARankWithoutSinksKeepsItsWindowRows) {
  auto backend = Cpu();
  const KvRetention r{4, 6};
  auto store = StreamingKvStore::Create(*backend, kLayout, r, 10);
  ASSERT_TRUE(store.ok());
  KvStore& s = **store;
  // This rank holds positions 10-19 of a 40-token prompt (another rank holds the rest).
  WriteStep(s, {{10, 20}});
  ASSERT_TRUE(s.Commit(std::vector<TokenRange>{{10, 20}}, 40).ok());
  EXPECT_EQ(s.held_rows(), 0);
  WriteStep(s, {{40, 41}});
  ASSERT_TRUE(s.Commit(std::vector<TokenRange>{{40, 41}}, 41).ok());
  EXPECT_EQ(HeldPositions(s), (std::vector<int64_t>{40}));
}

TEST(StreamingKvStoreTest, RefusesAnEmptyWindow) {
  auto backend = Cpu();
  EXPECT_FALSE(StreamingKvStore::Create(*backend, kLayout, KvRetention{4, 0}, 8).ok());
  EXPECT_FALSE(StreamingKvStore::Create(*backend, kLayout, KvRetention{4, 4}, 0).ok());
}

// The prefix cache's host tier: a store's held rows saved to host memory and loaded into a new
// store of the same kind, whole or before a shorter length; a window store's only at the length
// it was saved at, and only into a store of the same window.
TEST(KvStoreSaveTest, SavedRowsLoadIntoANewStore) {
  auto backend = Cpu();
  auto device = DeviceKvStore::Create(*backend, kLayout, 16);
  ASSERT_TRUE(device.ok());
  WriteStep(**device, {{0, 6}});
  ASSERT_TRUE((*device)->Commit(std::vector<TokenRange>{{0, 6}}, 6).ok());
  auto saved = (*device)->SaveRows(*backend, 0);
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  EXPECT_EQ(saved->rows(), 6);
  EXPECT_EQ(saved->NumBytes(), 6 * kLayout.RowBytes());
  auto copy = DeviceKvStore::Create(*backend, kLayout, 16);
  ASSERT_TRUE(copy.ok());
  ASSERT_TRUE((*copy)->LoadRows(*backend, 0, *saved, std::vector<TokenRange>{{0, 4}}, 4).ok());
  EXPECT_EQ(HeldPositions(**copy), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ((*copy)->LoadRows(*backend, 0, *saved, std::vector<TokenRange>{{0, 4}}, 4).code(),
            StatusCode::kInvalidArgument);  // not empty
  EXPECT_EQ((*device)->LoadRows(*backend, 1, *saved, std::vector<TokenRange>{{0, 4}}, 4).code(),
            StatusCode::kInvalidArgument);  // no part 1

  // A window store (sinks 2, window 3) saved at 10: rows 0, 1, 8, 9.
  const KvRetention window{2, 3};
  auto streaming = StreamingKvStore::Create(*backend, kLayout, window, 10);
  ASSERT_TRUE(streaming.ok());
  WriteStep(**streaming, {{0, 10}});
  ASSERT_TRUE((*streaming)->Commit(std::vector<TokenRange>{{0, 10}}, 10).ok());
  auto saved_window = (*streaming)->SaveRows(*backend, 0);
  ASSERT_TRUE(saved_window.ok());
  EXPECT_EQ(saved_window->rows(), 4);
  auto again = StreamingKvStore::Create(*backend, kLayout, window, 10);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->LoadRows(*backend, 0, *saved_window, std::vector<TokenRange>{{0, 9}}, 9)
                .code(),
            StatusCode::kFailedPrecondition);  // row 6 is gone
  ASSERT_TRUE(
      (*again)->LoadRows(*backend, 0, *saved_window, std::vector<TokenRange>{{0, 10}}, 10).ok());
  EXPECT_EQ(HeldPositions(**again), (std::vector<int64_t>{0, 1, 8, 9}));
  auto other = StreamingKvStore::Create(*backend, kLayout, KvRetention{2, 4}, 10);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ((*other)->LoadRows(*backend, 0, *saved_window, std::vector<TokenRange>{{0, 10}}, 10)
                .code(),
            StatusCode::kFailedPrecondition);  // another window
}

TEST(HostKvStoreTest, KeepsEveryRowInHostMemoryAndGathersSelectedRows) {
  auto backend = Cpu();
  auto store = HostKvStore::Create(*backend, kLayout, 12, 5);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  HostKvStore& s = **store;
  EXPECT_EQ(s.tier(), KvTier::kHost);
  WriteStep(s, {{0, 5}});
  EXPECT_EQ(s.Rows(5)->k.dim(0), 5);  // no held rows yet: the step's rows
  ASSERT_TRUE(s.Commit(std::vector<TokenRange>{{0, 5}}, 5).ok());
  WriteStep(s, {{7, 9}});
  // Held rows in host memory and step rows on the device: no view spans both.
  EXPECT_EQ(s.Rows(2).status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(s.Commit(std::vector<TokenRange>{{7, 9}}, 9).ok());
  ASSERT_TRUE(s.WaitForWrites().ok());
  EXPECT_EQ(HeldPositions(s), (std::vector<int64_t>{0, 1, 2, 3, 4, 7, 8}));
  // A packed gather of selected rows.
  const std::vector<int64_t> rows = {6, 0, 3};
  auto index = backend->Allocate(DType::kI64, Shape{3});
  auto k = backend->Allocate(DType::kF32, Shape{3, 2, 4});
  auto v = backend->Allocate(DType::kF32, Shape{3, 2, 4});
  ASSERT_TRUE(index.ok() && k.ok() && v.ok());
  ASSERT_TRUE(backend->CopyFromHost({rows.data(), DType::kI64, Shape{3}}, index->view()).ok());
  auto event = s.StartGather(index->cview(), {k->view(), v->view()});
  ASSERT_TRUE(event.ok()) << event.status().ToString();
  ASSERT_TRUE(backend->WaitCopy(*event).ok());
  for (int i = 0; i < 3; ++i) {
    const float expect[] = {8, 0, 3};
    EXPECT_EQ(k->cview().as<const float>()[i * 8 + 5], expect[i]);
    EXPECT_EQ(v->cview().as<const float>()[i * 8 + 2], -expect[i]);
  }
  EXPECT_EQ(s.NumBytes(), HostKvStore::HostBytesFor(kLayout, 12) +
                              HostKvStore::DeviceBytesFor(kLayout, 5));
  EXPECT_FALSE(s.StepRows(0, 6).ok());  // beyond the capacity
}

}  // namespace
}  // namespace millipede
