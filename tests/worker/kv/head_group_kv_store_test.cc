// HeadGroupKvStore: a step's rows written for every head go to their group's store at EndWrites
// (the full heads every row, the streaming heads their sinks and window), memory as planned and
// below one store of every row, keep_all_below kept, contract errors.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "worker/backend/backend_factory.h"
#include "worker/kv/head_group_kv_store.h"

namespace millipede {
namespace {

constexpr KvLayout kLayout{3, 2, DType::kF32};  // 3 KV heads, head_dim 2

std::unique_ptr<Backend> Cpu() { return std::move(CreateBackend(BackendKind::kCpu)).value(); }

// Writes rows whose K element is 100 * head + position and V element minus that.
void WriteStep(KvStore& s, const TokenRange& r) {
  auto rows = s.StepRows(0, r.size());
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  for (int64_t p = r.begin; p < r.end; ++p)
    for (int64_t h = 0; h < 3; ++h)
      for (int64_t i = 0; i < 2; ++i) {
        const int64_t at = ((p - r.begin) * 3 + h) * 2 + i;
        rows->k.as<float>()[at] = static_cast<float>(100 * h + p);
        rows->v.as<float>()[at] = -static_cast<float>(100 * h + p);
      }
}

// Per row of a group's store: the heads' values (100 * head + position), checked against V.
std::vector<std::vector<int64_t>> GroupRows(const KvStore& s) {
  const ConstKvRows rows = *s.Rows(0);
  const int64_t heads = rows.k.dim(1);
  std::vector<std::vector<int64_t>> out;
  for (int64_t row = 0; row < rows.k.dim(0); ++row) {
    std::vector<int64_t> values;
    for (int64_t h = 0; h < heads; ++h) {
      const float k = rows.k.as<const float>()[(row * heads + h) * 2 + 1];
      EXPECT_EQ(rows.v.as<const float>()[(row * heads + h) * 2], -k);
      values.push_back(static_cast<int64_t>(k));
    }
    out.push_back(values);
  }
  return out;
}

struct Made {
  std::shared_ptr<KvBuffer> staging;
  std::unique_ptr<HeadGroupKvStore> store;
};

Made Make(Backend& b, const KvRetention& streaming, int64_t capacity, int64_t step) {
  auto staging = KvBuffer::Create(b, kLayout, step);
  EXPECT_TRUE(staging.ok());
  Made m{std::make_shared<KvBuffer>(std::move(staging).value()), nullptr};
  auto store = HeadGroupKvStore::Create(b, kLayout, {{0, 2}, {1}}, streaming, capacity, step,
                                        m.staging);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  if (store.ok()) m.store = std::move(store).value();
  return m;
}

TEST(HeadGroupKvStoreTest, FullHeadsKeepEveryRowStreamingHeadsTheirWindow) {
  auto b = Cpu();
  Made m = Make(*b, {1, 3}, 40, 8);  // streaming: sink 0, a query at L sees L - 2 .. L
  HeadGroupKvStore& s = *m.store;
  for (const TokenRange r : {TokenRange{0, 8}, TokenRange{8, 12}, TokenRange{12, 13}}) {
    WriteStep(s, r);
    ASSERT_TRUE(s.EndWrites(r.size()).ok());
    // The step's rows are readable in both groups before the commit.
    EXPECT_EQ(s.group(HeadGroupKvStore::kFull).Rows(r.size())->k.dim(0), r.end);
    ASSERT_TRUE(s.Commit(std::vector<TokenRange>{r}, r.end).ok());
  }
  std::vector<std::vector<int64_t>> full;
  for (int64_t p = 0; p < 13; ++p) full.push_back({p, 200 + p});
  EXPECT_EQ(GroupRows(s.group(HeadGroupKvStore::kFull)), full);
  EXPECT_EQ(GroupRows(s.group(HeadGroupKvStore::kStreaming)),
            (std::vector<std::vector<int64_t>>{{100}, {111}, {112}}));
  EXPECT_EQ(s.held_rows(), 13);
  ASSERT_EQ(s.held_ranges().size(), 1u);
  EXPECT_EQ(s.held_ranges()[0].begin, 0);
  EXPECT_EQ(s.held_ranges()[0].end, 13);
  // One store of every head's rows is refused; memory is as planned and below one store's.
  EXPECT_EQ(s.Rows(0).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.NumBytes(), HeadGroupKvStore::BytesFor(kLayout, s.groups(), {1, 3}, 40, 8));
  EXPECT_LT(s.NumBytes(), DeviceKvStore::BytesFor(kLayout, 40));
}

// The prefix cache's shared blocks: a new store's full heads map a kept store's whole chunks
// (512 rows of a 2-float head fill whole 4 KiB pages) and copy the rest; its streaming heads copy
// their window.
TEST(HeadGroupKvStoreTest, FullHeadsShareTheChunksOfAKeptStore) {
  auto b = Cpu();
  Made src = Make(*b, {1, 3}, 2048, 1100);
  WriteStep(*src.store, {0, 1100});
  ASSERT_TRUE(src.store->EndWrites(1100).ok());
  ASSERT_TRUE(src.store->Commit(std::vector<TokenRange>{{0, 1100}}, 1100).ok());
  const auto& full =
      dynamic_cast<const DeviceKvStore&>(src.store->group(HeadGroupKvStore::kFull));
  const int64_t rows = DeviceKvStore::ShareableRows(full, 1100);
  EXPECT_EQ(rows, 1024);
  auto staging = std::make_shared<KvBuffer>(std::move(KvBuffer::Create(*b, kLayout, 8)).value());
  auto dst = HeadGroupKvStore::Create(*b, kLayout, {{0, 2}, {1}}, {1, 3}, 2048, 8, staging, &full,
                                      rows);
  ASSERT_TRUE(dst.ok()) << dst.status().ToString();
  ASSERT_TRUE((*dst)->RestoreFrom(*b, *src.store, std::vector<TokenRange>{{0, 1100}}, 1100).ok());
  const auto want_full = GroupRows(src.store->group(HeadGroupKvStore::kFull));
  const auto want_window = GroupRows(src.store->group(HeadGroupKvStore::kStreaming));
  EXPECT_EQ(dynamic_cast<const DeviceKvStore&>((*dst)->group(HeadGroupKvStore::kFull)).shared_rows(),
            1024);
  src.store.reset();
  EXPECT_EQ(GroupRows((*dst)->group(HeadGroupKvStore::kFull)), want_full);
  EXPECT_EQ(GroupRows((*dst)->group(HeadGroupKvStore::kStreaming)), want_window);
  EXPECT_EQ((*dst)->held_rows(), 1100);
}

TEST(HeadGroupKvStoreTest, StreamingHeadsKeepEveryRowBelowKeepAllBelow) {
  auto b = Cpu();
  Made m = Make(*b, {1, 3, 10}, 40, 4);
  HeadGroupKvStore& s = *m.store;
  for (int64_t begin = 0; begin < 12; begin += 4) {
    const TokenRange r{begin, begin + 4};
    WriteStep(s, r);
    ASSERT_TRUE(s.EndWrites(4).ok());
    ASSERT_TRUE(s.Commit(std::vector<TokenRange>{r}, r.end).ok());
    const int64_t kept = r.end < 10 ? r.end : 3;  // every row, then the sink and the window
    EXPECT_EQ(s.group(HeadGroupKvStore::kStreaming).held_rows(), kept) << "length " << r.end;
  }
  EXPECT_EQ(GroupRows(s.group(HeadGroupKvStore::kStreaming)),
            (std::vector<std::vector<int64_t>>{{100}, {110}, {111}}));
}

TEST(HeadGroupKvStoreTest, ContractErrors) {
  auto b = Cpu();
  Made m = Make(*b, {1, 3}, 10, 4);
  HeadGroupKvStore& s = *m.store;
  EXPECT_FALSE(s.StepRows(0, 5).ok());  // beyond a step
  WriteStep(s, {0, 4});
  // A commit of rows that EndWrites did not move is refused.
  EXPECT_FALSE(s.Commit(std::vector<TokenRange>{{0, 4}}, 4).ok());
  ASSERT_TRUE(s.EndWrites(4).ok());
  ASSERT_TRUE(s.Commit(std::vector<TokenRange>{{0, 4}}, 4).ok());
  // Groups that do not cover the layer, or leave one empty, or staging short of a step.
  auto staging = std::make_shared<KvBuffer>(std::move(KvBuffer::Create(*b, kLayout, 4)).value());
  EXPECT_FALSE(HeadGroupKvStore::Create(*b, kLayout, {{0}, {1}}, {1, 3}, 10, 4, staging).ok());
  EXPECT_FALSE(HeadGroupKvStore::Create(*b, kLayout, {{0, 1, 2}, {}}, {1, 3}, 10, 4, staging).ok());
  EXPECT_FALSE(HeadGroupKvStore::Create(*b, kLayout, {{0, 2}, {1}}, {1, 3}, 10, 5, staging).ok());
}

}  // namespace
}  // namespace millipede
