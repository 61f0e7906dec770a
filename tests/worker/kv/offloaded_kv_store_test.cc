// The host-tier store of OmniKV's selected layers: context rows staged in two shared slots and
// copied to host memory as the next store takes a slot (or at commit), a later step reading held
// and step rows through the window, generated rows kept on the device after EndContext, a
// take-over, capacities and contract errors.
#include "worker/backend/backend_factory.h"
#include "worker/kv/offloaded_kv_store.h"
#include "worker/kv/saved_kv_rows.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace millipede {
namespace {

constexpr KvLayout kLayout{2, 4, DType::kF32};  // 2 KV heads, head_dim 4: 8 floats per row

std::unique_ptr<Backend> Cpu() { return std::move(CreateBackend(BackendKind::kCpu)).value(); }

// Writes rows [offset, offset + n) of the step: every K element `tag` + position, V minus it.
void Write(KvStore& s, int64_t offset, TokenRange r, float tag) {
  auto rows = s.StepRows(offset, r.size());
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  for (int64_t p = r.begin; p < r.end; ++p)
    for (int64_t i = 0; i < 8; ++i) {
      rows->k.as<float>()[(p - r.begin) * 8 + i] = tag + static_cast<float>(p);
      rows->v.as<float>()[(p - r.begin) * 8 + i] = -(tag + static_cast<float>(p));
    }
}

// The K values of each row of `rows` (first element), and a check of V.
std::vector<float> Values(ConstKvRows rows) {
  std::vector<float> out;
  for (int64_t r = 0; r < rows.k.dim(0); ++r) {
    out.push_back(rows.k.as<const float>()[r * 8]);
    EXPECT_EQ(rows.v.as<const float>()[r * 8 + 7], -out.back());
  }
  return out;
}

struct Stores {
  std::unique_ptr<Backend> backend = Cpu();
  BackendTensor arena;
  std::unique_ptr<OffloadedKvStore> a, b, c;
};

// Three stores over one arena of 3 x (K, V) blocks of 10 rows, sharing staging slots of 6 rows
// and a window of `window` rows, each with room for 3 generated rows.
Stores Make(int64_t window = 10) {
  Stores p;
  p.arena = std::move(p.backend->AllocateHost(DType::kF32, Shape{60, 2, 4})).value();
  std::fill_n(p.arena.view().as<float>(), p.arena.view().NumElements(), -1.0f);
  auto pool = KvStagingPool::Create(*p.backend, kLayout, 6, window);
  EXPECT_TRUE(pool.ok());
  std::unique_ptr<OffloadedKvStore>* stores[] = {&p.a, &p.b, &p.c};
  for (int i = 0; i < 3; ++i) {
    const KvRows host{SliceRows(p.arena.view(), 20 * i, 10),
                      SliceRows(p.arena.view(), 20 * i + 10, 10)};
    auto s = OffloadedKvStore::Create(*p.backend, kLayout, host, *pool, 3);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    *stores[i] = std::move(s).value();
  }
  return p;
}

TEST(OffloadedKvStoreTest, ContextRowsGoToHostMemoryAndGeneratedRowsStayOnTheDevice) {
  Stores p = Make();
  OffloadedKvStore &a = *p.a, &b = *p.b, &c = *p.c;
  EXPECT_EQ(a.tier(), KvTier::kHost);
  // A prefill step of 5 rows in chunks, layer after layer (three stores, two slots).
  Write(a, 0, {0, 3}, 100);
  Write(a, 3, {3, 5}, 100);
  EXPECT_EQ(Values(*a.Rows(5)), (std::vector<float>{100, 101, 102, 103, 104}));
  Write(b, 0, {0, 5}, 200);  // a's rows leave for host memory now
  EXPECT_EQ(Values(*b.Rows(5)), (std::vector<float>{200, 201, 202, 203, 204}));
  Write(c, 0, {0, 5}, 300);  // takes a's slot once its copy is done
  EXPECT_EQ(Values(*c.Rows(5)), (std::vector<float>{300, 301, 302, 303, 304}));
  for (OffloadedKvStore* s : {&a, &b, &c})
    ASSERT_TRUE(s->Commit(std::vector<TokenRange>{{0, 5}}, 5).ok());
  // A second step of context rows (a prompt's next chunk): held rows in host memory, step rows
  // staged, both read through the window (and again without a copy).
  Write(a, 0, {5, 7}, 100);
  EXPECT_EQ(Values(*a.Rows(2)), (std::vector<float>{100, 101, 102, 103, 104, 105, 106}));
  EXPECT_EQ(Values(*a.Rows(2)), (std::vector<float>{100, 101, 102, 103, 104, 105, 106}));
  for (OffloadedKvStore* s : {&b, &c}) {
    Write(*s, 0, {5, 7}, s == &b ? 200.0f : 300.0f);
    const float t = s == &b ? 200.0f : 300.0f;
    EXPECT_EQ(Values(*s->Rows(2)), (std::vector<float>{t, t + 1, t + 2, t + 3, t + 4, t + 5,
                                                       t + 6}));
  }
  for (OffloadedKvStore* s : {&a, &b, &c})
    ASSERT_TRUE(s->Commit(std::vector<TokenRange>{{5, 7}}, 7).ok());
  ASSERT_TRUE(a.WaitForWrites().ok());
  EXPECT_EQ(Values(*a.Rows(0)), (std::vector<float>{100, 101, 102, 103, 104, 105, 106}));
  EXPECT_EQ(Values(*c.Rows(0)), (std::vector<float>{300, 301, 302, 303, 304, 305, 306}));
  // The arena holds each store's rows at its block.
  EXPECT_EQ(p.arena.cview().as<const float>()[20 * 8 * 1 + 6 * 8], 206.0f);
  EXPECT_EQ(a.context_rows(), 7);

  // Decode: generated rows on the device, the context untouched.
  a.EndContext();
  a.EndContext();  // idempotent
  EXPECT_EQ(a.Rows(0).status().code(), StatusCode::kFailedPrecondition);
  Write(a, 0, {7, 8}, 100);
  EXPECT_EQ(Values(*a.GeneratedRows(1)), (std::vector<float>{107}));
  ASSERT_TRUE(a.Commit(std::vector<TokenRange>{{7, 8}}, 8).ok());
  Write(a, 0, {9, 10}, 100);
  ASSERT_TRUE(a.Commit(std::vector<TokenRange>{{9, 10}}, 10).ok());
  EXPECT_EQ(Values(*a.GeneratedRows(0)), (std::vector<float>{107, 109}));
  EXPECT_EQ(a.context_rows(), 7);
  EXPECT_EQ(a.held_rows(), 9);
  EXPECT_EQ(p.arena.cview().as<const float>()[7 * 8], -1.0f);  // generated rows stay off it
  EXPECT_EQ(a.HostBytes(), 10 * kLayout.RowBytes());
  EXPECT_EQ(a.NumBytes(), 10 * kLayout.RowBytes() + OffloadedKvStore::DeviceBytesFor(kLayout, 3));
  // Room for 3 generated rows.
  Write(a, 0, {10, 11}, 100);
  EXPECT_EQ(a.StepRows(0, 2).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(a.Commit(std::vector<TokenRange>{{10, 12}}, 12).ok());
}

// The prefix cache's host tier: a decoded store's context rows (host) and generated rows
// (device) saved in position order, and loaded back as a new store's context rows.
TEST(OffloadedKvStoreTest, SavedRowsLoadAsContext) {
  Stores p = Make();
  OffloadedKvStore &a = *p.a, &b = *p.b;
  Write(a, 0, {0, 5}, 100);
  ASSERT_TRUE(a.Commit(std::vector<TokenRange>{{0, 5}}, 5).ok());
  a.EndContext();
  Write(a, 0, {5, 6}, 100);
  ASSERT_TRUE(a.Commit(std::vector<TokenRange>{{5, 6}}, 6).ok());
  auto saved = a.SaveRows(*p.backend, 0);
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  EXPECT_EQ(saved->rows(), 6);
  EXPECT_EQ(Values({saved->k.cview(), saved->v.cview()}),
            (std::vector<float>{100, 101, 102, 103, 104, 105}));
  EXPECT_EQ(a.SaveRows(*p.backend, 1).status().code(), StatusCode::kInvalidArgument);
  // Loaded at a shorter length: the rows before it, all context, in host memory.
  const std::vector<TokenRange> stored = {{0, 4}};
  ASSERT_TRUE(b.LoadRows(*p.backend, 0, *saved, stored, 4).ok());
  EXPECT_EQ(b.context_rows(), 4);
  EXPECT_EQ(Values(*b.Rows(0)), (std::vector<float>{100, 101, 102, 103}));
  // Only into an empty store, and only what the positions say.
  EXPECT_FALSE(b.LoadRows(*p.backend, 0, *saved, stored, 4).ok());
  EXPECT_EQ(p.c->LoadRows(*p.backend, 0, *saved, std::vector<TokenRange>{{0, 3}, {4, 5}}, 5)
                .code(),
            StatusCode::kFailedPrecondition);
}

// A cached sequence taken over: the rows before the new length (generated ones among them) become
// context rows in host memory, and the next step reads them with its own through the window.
TEST(OffloadedKvStoreTest, TakenOverStoreContinuesItsContext) {
  Stores p = Make();
  OffloadedKvStore& a = *p.a;
  Write(a, 0, {0, 5}, 100);
  ASSERT_TRUE(a.Commit(std::vector<TokenRange>{{0, 5}}, 5).ok());
  a.EndContext();
  for (int64_t pos : {5, 6}) {
    Write(a, 0, {pos, pos + 1}, 100);
    ASSERT_TRUE(a.Commit(std::vector<TokenRange>{{pos, pos + 1}}, pos + 1).ok());
  }
  ASSERT_TRUE(a.Truncate(std::vector<TokenRange>{{0, 6}}, 6).ok());
  EXPECT_FALSE(a.context_ended());
  EXPECT_EQ(a.held_rows(), 6);
  Write(a, 0, {6, 8}, 500);
  EXPECT_EQ(Values(*a.Rows(2)), (std::vector<float>{100, 101, 102, 103, 104, 105, 506, 507}));
  ASSERT_TRUE(a.Commit(std::vector<TokenRange>{{6, 8}}, 8).ok());
  ASSERT_TRUE(a.WaitForWrites().ok());
  EXPECT_EQ(Values(*a.Rows(0)), (std::vector<float>{100, 101, 102, 103, 104, 105, 506, 507}));
  // Positions the store does not hold as asked for are refused.
  EXPECT_EQ(p.b->Truncate(std::vector<TokenRange>{{0, 3}}, 3).code(),
            StatusCode::kFailedPrecondition);
}

// Without a window (a sequence prefilled in one step) a step after held rows is refused.
TEST(OffloadedKvStoreTest, StepAfterHeldRowsNeedsTheWindow) {
  Stores p = Make(/*window=*/0);
  Write(*p.a, 0, {0, 3}, 100);
  ASSERT_TRUE(p.a->Commit(std::vector<TokenRange>{{0, 3}}, 3).ok());
  Write(*p.a, 0, {3, 4}, 100);
  EXPECT_EQ(p.a->Rows(1).status().code(), StatusCode::kFailedPrecondition);
}

TEST(OffloadedKvStoreTest, CapacityAndCommitErrors) {
  Stores p = Make();
  // Context beyond the host rows, a step beyond a slot.
  EXPECT_EQ(p.a->StepRows(0, 7).status().code(), StatusCode::kInvalidArgument);
  Write(*p.a, 0, {0, 6}, 1);
  ASSERT_TRUE(p.a->Commit(std::vector<TokenRange>{{0, 6}}, 6).ok());
  EXPECT_EQ(p.a->StepRows(0, 5).status().code(), StatusCode::kInvalidArgument);  // 11 > 10
  // A commit of more rows than the step wrote is our own bug, not a caller's.
  Write(*p.b, 0, {0, 2}, 2);
  EXPECT_EQ(p.b->Commit(std::vector<TokenRange>{{0, 3}}, 3).code(), StatusCode::kInternal);
  // Host rows that do not fit the layout.
  BackendTensor small = std::move(p.backend->AllocateHost(DType::kF32, Shape{4, 1, 4})).value();
  auto pool = KvStagingPool::Create(*p.backend, kLayout, 2, 0);
  ASSERT_TRUE(pool.ok());
  EXPECT_EQ(OffloadedKvStore::Create(*p.backend, kLayout, {small.view(), small.view()}, *pool, 1)
                .status()
                .code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace millipede
