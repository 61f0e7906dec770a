// The prefix cache on the engine, on one process and under mpirun with N ranks: a sequence kept
// after its prompt (Engine::KeepSequence) and a later sequence started from it
// (StartSequence with a CachedPrefix) that prefills only the rest of its prompt give the logits
// of a sequence that prefilled the whole prompt in the same chunks — for dense attention,
// vertical-slash prefill, DuoAttention's head groups (a-shape prefill, streaming-head decode)
// and OmniKV (its selected layers on the device or in the host tier), whether the later
// sequence copies the kept one's KV, takes the kept sequence over, or copies it back from the
// host or the disk tier. Each rank restores its own share; nothing crosses ranks. Logits within
// 1e-5 relative in fp32; greedy tokens identical.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <functional>
#include <fstream>
#include <string>

#include "../engine_test_util.h"
#include "worker/dist/mpi_communicator.h"
#include "worker/kv/device_kv_store.h"

namespace millipede {
namespace {

using testing::MaxRelError;
using testing::RandomIds;

constexpr int64_t kPrompt = 150;  // the follow-up's prompt
constexpr int64_t kCached = 96;   // the document: a prefix of it, prefilled in chunks
constexpr int64_t kChunk = 32;
const std::vector<int32_t> kDecode = {7, 41, 63};

ModelConfig EightLayers() {
  ModelConfig c = testing::SmallConfig();
  c.num_hidden_layers = 8;
  return c;
}

std::unique_ptr<Engine> MakeEngine() {
  auto comm = CreateMpiCommunicator(MPI_COMM_WORLD);
  EXPECT_TRUE(comm.ok());
  auto e = Engine::Create(
      testing::RandomEngineOptions(EightLayers(), DType::kF32, DType::kF32, kChunk),
      std::move(comm).value());
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return std::move(e).value();
}

struct Case {
  const char* name;
  const char* policy_json;
  SelectedKvTier tier = SelectedKvTier::kAuto;
  bool every_length = false;  // the KV of any prefix is reusable (exact attention, all rows)
  // The host tier as if the memory plan chose it (SequenceOptions::host_tier_movable): a kept
  // sequence moves those layers to the device where there is room (always, on the CPU backend).
  bool movable = false;
};

constexpr char kOmniKv[] = R"({"version": 1, "filter": {"top_k": 12},
    "layers": [{"layer": 1, "decode": "filter"}, {"layer": 2, "decode": "selected"},
               {"layer": 3, "decode": "selected"}, {"layer": 4, "decode": "selected"},
               {"layer": 5, "decode": "filter"}, {"layer": 6, "decode": "selected"},
               {"layer": 7, "decode": "selected"}]})";

const Case kCases[] = {
    {"dense", R"({"version": 1})", SelectedKvTier::kAuto, true},
    {"vertical_slash", R"({"version": 1, "default": {"prefill": "vertical-slash"},
      "vertical_slash": {"last_queries": 16, "vertical": 4, "slash": 6}})"},
    {"duo", R"({"version": 1, "a_shape": {"sink_tokens": 2, "window_tokens": 8},
      "streaming_head": {"sink_tokens": 2, "window_tokens": 8},
      "layers": [{"layer": 1, "prefill": ["a-shape", "dense"],
                  "decode": ["streaming-head", "full"]},
                 {"layer": 2, "prefill": "a-shape", "decode": "streaming-head"}]})"},
    {"omnikv_device", kOmniKv, SelectedKvTier::kDevice, true},
    // Selected layers 3, 4 and 7 in the host tier: later chunks read their held rows through the
    // window, a take-over keeps them in place.
    {"omnikv_host", kOmniKv, SelectedKvTier::kHost, true},
    {"omnikv_movable", kOmniKv, SelectedKvTier::kHost, true, true},
};

class PrefixCacheCpTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    engine_ = MakeEngine();
    policy_ = testing::PolicyFor(*engine_, GetParam().policy_json);
    prompt_ = RandomIds(kPrompt, 97, 21);
  }

  Status Start(SequenceId id, std::optional<CachedPrefix> prefix = std::nullopt) {
    return StartIn(GetParam().tier, id, prefix);
  }
  Status StartIn(SelectedKvTier tier, SequenceId id,
                 std::optional<CachedPrefix> prefix = std::nullopt) {
    SequenceOptions o{kPrompt + static_cast<int64_t>(kDecode.size()), kPrompt, policy_};
    o.selected_kv = tier;
    o.host_tier_movable = GetParam().movable && tier == SelectedKvTier::kHost;
    return engine_->StartSequence(id, o, prefix);
  }

  // The logits of `out`'s entry `i`, on every rank, after a chunk of `count` tokens (owner: the
  // rank holding its last token) or a decode token (owner rank 0).
  std::vector<float> Logits(const StepOutput& out, size_t i, int owner) {
    const int64_t vocab = engine_->config().vocab_size;
    std::vector<float> host(static_cast<size_t>(vocab));
    if (out.logits[i].has_value()) {
      EXPECT_TRUE(engine_->backend()
                      .CopyToHost(*out.logits[i], {host.data(), DType::kF32, Shape{vocab}})
                      .ok());
    }
    EXPECT_TRUE(engine_->comm().HostBroadcast(host.data(), host.size() * sizeof(float), owner)
                    .ok());
    return host;
  }

  SequenceStep Chunk(SequenceId id, int64_t begin, int64_t end) {
    auto step = ShardedPrefill(id, begin, std::span(prompt_).subspan(begin, end - begin),
                               engine_->comm().rank(), engine_->comm().size());
    EXPECT_TRUE(step.ok());
    return *step;
  }

  // Prefills [begin, end) of the prompt in chunks of `chunk`; the last chunk's logits.
  std::vector<float> Prefill(SequenceId id, int64_t begin, int64_t end, int64_t chunk) {
    std::vector<float> last;
    for (int64_t b = begin; b < end; b += chunk) {
      const int64_t e = std::min(end, b + chunk);
      auto out = engine_->RunStep(StepPlan{{Chunk(id, b, e)}});
      EXPECT_TRUE(out.ok()) << out.status().ToString();
      if (!out.ok()) return {};
      last = Logits(*out, 0, ShardPlan::LastTokenRank(e - b, engine_->comm().size()));
    }
    return last;
  }

  // The follow-up's logits: the prompt's last chunk, then each decode token's.
  std::vector<std::vector<float>> Finish(SequenceId id, int64_t begin) {
    std::vector<std::vector<float>> all = {Prefill(id, begin, kPrompt, kPrompt)};
    for (int32_t token : kDecode) {
      auto out = engine_->RunStep(StepPlan{{DecodeStep(id, token)}});
      EXPECT_TRUE(out.ok()) << out.status().ToString();
      if (!out.ok()) break;
      all.push_back(Logits(*out, 0, 0));
    }
    return all;
  }

  // Sequence `id` prefilled [0, kCached) in chunks, then [kCached, kPrompt) and decoded: what a
  // restored sequence must give.
  std::vector<std::vector<float>> Reference(SequenceId id) {
    return ReferenceIn(GetParam().tier, id);
  }
  std::vector<std::vector<float>> ReferenceIn(SelectedKvTier tier, SequenceId id) {
    EXPECT_TRUE(StartIn(tier, id).ok());
    Prefill(id, 0, kCached, kChunk);
    auto all = Finish(id, kCached);
    engine_->EndSequence(id);
    return all;
  }

  // Sequence `id` prefilled [0, kCached) in chunks and kept in the cache.
  void Document(SequenceId id) {
    ASSERT_TRUE(Start(id).ok());
    Prefill(id, 0, kCached, kChunk);
    ASSERT_TRUE(engine_->KeepSequence(id).ok());
  }

  // Sequences `a` and `b` (started from a cached prefix of kCached) run their rests in one step,
  // then their decode tokens together (`between` runs after the prefill step); each one's
  // logits, as Finish gives them.
  std::array<std::vector<std::vector<float>>, 2> FinishTogether(
      SequenceId a, SequenceId b, const std::function<void()>& between = {}) {
    std::array<std::vector<std::vector<float>>, 2> got;
    auto out = engine_->RunStep(StepPlan{{Chunk(a, kCached, kPrompt), Chunk(b, kCached, kPrompt)}});
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    if (!out.ok()) return got;
    const int owner = ShardPlan::LastTokenRank(kPrompt - kCached, engine_->comm().size());
    for (size_t i = 0; i < 2; ++i) got[i].push_back(Logits(*out, i, owner));
    if (between) between();
    for (int32_t token : kDecode) {
      out = engine_->RunStep(StepPlan{{DecodeStep(a, token), DecodeStep(b, token)}});
      EXPECT_TRUE(out.ok()) << out.status().ToString();
      if (!out.ok()) break;
      for (size_t i = 0; i < 2; ++i) got[i].push_back(Logits(*out, i, 0));
    }
    return got;
  }

  static void ExpectSame(const std::vector<std::vector<float>>& got,
                         const std::vector<std::vector<float>>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      SCOPED_TRACE("output " + std::to_string(i));
      EXPECT_LT(MaxRelError(got[i], want[i]), 1e-5);
      EXPECT_EQ(std::max_element(got[i].begin(), got[i].end()) - got[i].begin(),
                std::max_element(want[i].begin(), want[i].end()) - want[i].begin());
    }
  }

  std::unique_ptr<Engine> engine_;
  AttentionPolicy policy_;
  std::vector<int32_t> prompt_;
};

TEST_P(PrefixCacheCpTest, FollowUpEqualsAnUncachedRun) {
  const auto want = Reference(1);
  Document(2);
  EXPECT_EQ(engine_->num_sequences(), 0);
  EXPECT_EQ(engine_->num_cached(), 1);
  EXPECT_GT(engine_->CachedKvBytes(), 0);
  ASSERT_TRUE(Start(3, CachedPrefix{2, kCached}).ok());
  EXPECT_EQ(engine_->sequence(3)->length(), kCached);
  ExpectSame(Finish(3, kCached), want);
  engine_->EndSequence(3);
  // The entry is unchanged by the follow-up: a second one gives the same.
  ASSERT_TRUE(Start(4, CachedPrefix{2, kCached}).ok());
  ExpectSame(Finish(4, kCached), want);
  engine_->EndSequence(4);
  engine_->DropCached(2);
  EXPECT_EQ(engine_->num_cached(), 0);
  EXPECT_EQ(engine_->CachedKvBytes(), 0);
  EXPECT_EQ(Start(5, CachedPrefix{2, kCached}).code(), StatusCode::kNotFound);
}

TEST_P(PrefixCacheCpTest, TwoFollowUpsFromOneEntryAtOnce) {
  const auto want = Reference(1);
  Document(2);
  ASSERT_TRUE(Start(3, CachedPrefix{2, kCached}).ok());
  ASSERT_TRUE(Start(4, CachedPrefix{2, kCached}).ok());
  const auto got = FinishTogether(3, 4);
  ExpectSame(got[0], want);
  ExpectSame(got[1], want);
}

// Two follow-ups sharing the entry's blocks (CachedPrefix::share: whole chunks mapped, not
// copied) give the uncached logits, also once the entry is gone while they run; a kept sequence
// whose rows are shared is not taken over below them.
TEST_P(PrefixCacheCpTest, FollowUpsSharingTheEntrysBlocks) {
  const auto want = Reference(1);
  Document(2);
  const CachedPrefix shared{2, kCached, /*take=*/false, /*share=*/true};
  ASSERT_TRUE(Start(3, shared).ok());
  ASSERT_TRUE(Start(4, shared).ok());
  // 96 positions on one rank fill a 64-row chunk of the stores that keep every row in backend
  // memory (every policy here has some); over 3 ranks, 32 positions per rank fill none.
  const bool shares = engine_->comm().size() == 1;
  int64_t shared_rows = 0;
  for (int64_t l = 0; l < engine_->sequence(3)->num_layers(); ++l)
    if (const auto* d = dynamic_cast<const DeviceKvStore*>(&engine_->sequence(3)->kv(l)))
      shared_rows += d->shared_rows();
  EXPECT_EQ(shared_rows > 0, shares);
  // The running sequences' KV bytes include the entry's mapped chunks; they are counted apart.
  EXPECT_EQ(engine_->SharedKvBytes() > 0, shares);
  EXPECT_LT(engine_->SharedKvBytes(), engine_->KvBytes());
  // The shared chunks stay while a sequence maps them: the entry goes after the prefill.
  const auto got = FinishTogether(3, 4, [&] { engine_->DropCached(2); });
  ExpectSame(got[0], want);
  ExpectSame(got[1], want);
  // Kept, sequence 3's first chunk is still sequence 4's: a take-over that would write over it
  // is refused on every rank (and frees the kept sequence, as a failed take does).
  ASSERT_TRUE(engine_->KeepSequence(3).ok());
  if (shares)
    EXPECT_EQ(Start(5, CachedPrefix{3, 40, /*take=*/true}).code(), StatusCode::kFailedPrecondition);
  engine_->EndSequence(4);
}

// A prefix shorter than the cached one: exact where the stores keep every row and attention is
// exact; refused on every rank where a store keeps a window only.
TEST_P(PrefixCacheCpTest, ShorterPrefix) {
  constexpr int64_t kShorter = kCached - 21;  // inside a chunk
  Document(2);
  Status started = Start(3, CachedPrefix{2, kShorter});
  if (std::string(GetParam().name) == "duo") {
    EXPECT_EQ(started.code(), StatusCode::kFailedPrecondition) << started.ToString();
    EXPECT_EQ(engine_->num_sequences(), 0);
    return;
  }
  ASSERT_TRUE(started.ok()) << started.ToString();
  const auto got = Finish(3, kShorter);
  if (!GetParam().every_length) return;  // vertical-slash: its chunks differ; it runs
  EXPECT_TRUE(Start(1).ok());
  Prefill(1, 0, kShorter, kShorter);
  ExpectSame(got, Finish(1, kShorter));
}

// Chunked prefill with host-tier layers (their held rows read through the window) gives what
// the same layers on the device give.
TEST_P(PrefixCacheCpTest, HostTierEqualsTheDeviceTier) {
  if (GetParam().tier != SelectedKvTier::kHost) GTEST_SKIP() << "host-tier layers only";
  const auto device = ReferenceIn(SelectedKvTier::kDevice, 1);
  ASSERT_TRUE(Start(2).ok());
  EXPECT_GT(engine_->sequence(2)->HostKvBytes(), 0);
  engine_->EndSequence(2);
  ExpectSame(Reference(3), device);
}

// A take-over: the cached sequence itself continues (no copy); the entry is gone. OmniKV's
// selections start again; host-tier layers keep their rows in place.
TEST_P(PrefixCacheCpTest, TakeOverEqualsAnUncachedRun) {
  const auto want = Reference(1);
  Document(2);
  const int64_t cached_bytes = engine_->CachedKvBytes();
  Status started = Start(3, CachedPrefix{2, kCached, /*take=*/true});
  EXPECT_EQ(engine_->num_cached(), 0);
  ASSERT_TRUE(started.ok()) << started.ToString();
  EXPECT_EQ(engine_->KvBytes(), cached_bytes);  // the same memory, nothing allocated
  ExpectSame(Finish(3, kCached), want);
  // Kept again and taken over at a shorter length (dense: any length).
  ASSERT_TRUE(engine_->KeepSequence(3).ok());
  if (!GetParam().every_length) return;
  constexpr int64_t kShorter = kCached - 21;
  ASSERT_TRUE(Start(4, CachedPrefix{3, kShorter, true}).ok());
  EXPECT_EQ(engine_->sequence(4)->length(), kShorter);
  EXPECT_TRUE(Start(1).ok());
  Prefill(1, 0, kShorter, kShorter);
  ExpectSame(Finish(4, kShorter), Finish(1, kShorter));
}

// A movable host tier: kept, the layers move to the device (there is room); laid out again with
// some or all of them in the host tier (what a take-over whose step lacks room does), then up
// again, a copy and a take-over still equal an uncached run.
TEST_P(PrefixCacheCpTest, MovableHostTierMovesBetweenTiers) {
  if (!GetParam().movable) GTEST_SKIP() << "a movable host tier only";
  const auto want = Reference(1);
  ASSERT_TRUE(Start(2).ok());
  Prefill(2, 0, kCached, kChunk);
  const int64_t host_layers = engine_->sequence(2)->host_layers();
  EXPECT_EQ(host_layers, 3);
  EXPECT_GT(engine_->sequence(2)->HostKvBytes(), 0);
  ASSERT_TRUE(engine_->KeepSequence(2).ok());
  EXPECT_EQ(engine_->cached_sequence(2)->host_layers(), 0);
  EXPECT_EQ(engine_->CachedHostKvBytes(), 0);
  ASSERT_TRUE(engine_->RelayoutCached(2, 1).ok());
  EXPECT_EQ(engine_->cached_sequence(2)->host_layers(), 1);
  EXPECT_GT(engine_->CachedHostKvBytes(), 0);
  ASSERT_TRUE(Start(3, CachedPrefix{2, kCached}).ok());
  EXPECT_EQ(engine_->sequence(3)->host_layers(), 1);
  ExpectSame(Finish(3, kCached), want);
  engine_->EndSequence(3);
  ASSERT_TRUE(engine_->RelayoutCached(2, -1).ok());
  EXPECT_EQ(engine_->cached_sequence(2)->host_layers(), host_layers);
  ASSERT_TRUE(engine_->RelayoutCached(2, 2).ok());
  EXPECT_EQ(engine_->cached_sequence(2)->host_layers(), 2);
  ASSERT_TRUE(Start(4, CachedPrefix{2, kCached, /*take=*/true}).ok());
  ExpectSame(Finish(4, kCached), want);
  // Kept after decoding: its generated rows are cut, its context moves up again.
  ASSERT_TRUE(engine_->KeepSequence(4).ok());
  EXPECT_EQ(engine_->cached_sequence(4)->host_layers(), 0);
  EXPECT_EQ(engine_->cached_sequence(4)->length(), kPrompt);
  EXPECT_EQ(engine_->RelayoutCached(9, 1).code(), StatusCode::kNotFound);
}

// The host tier: a kept sequence moved to host memory (Engine::DemoteCached, every store's held
// rows saved) frees its KV memory, and a follow-up restored from there equals an uncached run,
// at the cached length and, where the stores allow, a shorter one; a take from the host tier is
// a copy that frees the saved entry.
TEST_P(PrefixCacheCpTest, FollowUpFromTheHostTier) {
  const auto want = Reference(1);
  Document(2);
  const int64_t live_bytes = engine_->CachedKvBytes();
  ASSERT_TRUE(engine_->DemoteCached(2).ok());
  EXPECT_EQ(engine_->num_cached(), 1);
  EXPECT_GT(engine_->CachedHostKvBytes(), 0);
  EXPECT_EQ(engine_->CachedHostKvBytes(), engine_->CachedKvBytes());
  EXPECT_LT(engine_->CachedKvBytes(), live_bytes);  // the held rows only
  EXPECT_EQ(engine_->DemoteCached(2).code(), StatusCode::kNotFound);
  ASSERT_TRUE(Start(3, CachedPrefix{2, kCached}).ok());
  EXPECT_EQ(engine_->sequence(3)->length(), kCached);
  ExpectSame(Finish(3, kCached), want);
  engine_->EndSequence(3);
  if (GetParam().every_length) {
    constexpr int64_t kShorter = kCached - 21;
    ASSERT_TRUE(Start(4, CachedPrefix{2, kShorter}).ok());
    ASSERT_TRUE(Start(1).ok());
    Prefill(1, 0, kShorter, kShorter);
    ExpectSame(Finish(4, kShorter), Finish(1, kShorter));
    engine_->EndSequence(4);
    engine_->EndSequence(1);
  }
  ASSERT_TRUE(Start(5, CachedPrefix{2, kCached, /*take=*/true}).ok());
  EXPECT_EQ(engine_->num_cached(), 0);
  ExpectSame(Finish(5, kCached), want);
}

// The disk tier: kept sequences written to files (from backend memory and from the host tier)
// and restored from them equal an uncached run; a new tier on the same directory (a restart)
// finds them; a file corrupted on one rank fails the start on every rank and is never served.
TEST_P(PrefixCacheCpTest, FollowUpFromTheDiskTier) {
  namespace fs = std::filesystem;
  const int rank = engine_->comm().rank();
  const fs::path dir = fs::temp_directory_path() /
                       ("millipede_prefix_cp_np" + std::to_string(engine_->comm().size()) + "_" +
                        GetParam().name);
  fs::remove_all(dir / ("rank-" + std::to_string(rank)));
  auto open = [&] {
    // As a restart does: the old tier's writes end before a new tier scans the directory (which
    // removes half-written files).
    if (engine_->disk_tier() != nullptr) engine_->disk_tier()->Flush();
    auto disk = DiskTier::Open(dir.string(), rank);
    EXPECT_TRUE(disk.ok()) << disk.status().ToString();
    engine_->AttachDiskTier(std::move(disk).value());
  };
  open();
  const auto want = Reference(1);
  const DiskEntryMeta meta{.id = 0, .key = 1, .model_key = "m", .tokens = {1, 2},
                           .every_length = true, .lengths = {}};
  Document(2);
  ASSERT_TRUE(engine_->SpillCached(2, meta).ok());
  Document(4);
  ASSERT_TRUE(engine_->DemoteCached(4).ok());
  ASSERT_TRUE(engine_->SpillCached(4, meta).ok());
  EXPECT_EQ(engine_->num_cached(), 0);
  EXPECT_GT(engine_->CachedDiskBytes(), 0);
  // Read from memory while it is written, or from the file once it is.
  ASSERT_TRUE(Start(3, CachedPrefix{2, kCached}).ok());
  ExpectSame(Finish(3, kCached), want);
  engine_->EndSequence(3);
  // A restart: the writes finish, a new tier finds both entries.
  open();
  ASSERT_EQ(engine_->disk_tier()->Entries().size(), 2u);
  ASSERT_TRUE(Start(5, CachedPrefix{4, kCached}).ok());
  ExpectSame(Finish(5, kCached), want);
  engine_->EndSequence(5);
  // One rank's file of entry 2 corrupted: the start fails everywhere, that rank drops it.
  if (rank == engine_->comm().size() - 1) {
    std::fstream f(dir / ("rank-" + std::to_string(rank)) / "2.mkv",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-20, std::ios::end);
    f.put('\x55');
  }
  EXPECT_FALSE(Start(6, CachedPrefix{2, kCached}).ok());
  EXPECT_EQ(engine_->num_sequences(), 0);
  if (rank == engine_->comm().size() - 1) {
    EXPECT_EQ(engine_->disk_tier()->Entries().size(), 1u);
  }
  engine_->DropCached(2);
  engine_->DropCached(4);
  EXPECT_TRUE(engine_->disk_tier()->Entries().empty());
  EXPECT_EQ(engine_->CachedDiskBytes(), 0);
  fs::remove_all(dir / ("rank-" + std::to_string(rank)));
}

// A window store cannot forget rows: a take-over at a shorter length is refused on every rank.
TEST_P(PrefixCacheCpTest, TakeOverOfAWindowStoreAtAnotherLengthIsRefused) {
  if (std::string(GetParam().name) != "duo") GTEST_SKIP() << "only window stores refuse";
  Document(2);
  EXPECT_EQ(Start(3, CachedPrefix{2, kCached - 21, true}).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(engine_->num_cached(), 0);
  EXPECT_EQ(engine_->num_sequences(), 0);
}

TEST_P(PrefixCacheCpTest, BadRestoresFailOnEveryRank) {
  Document(2);
  EXPECT_EQ(Start(3, CachedPrefix{2, kCached + 1}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Start(3, CachedPrefix{9, 10}).code(), StatusCode::kNotFound);
  // The cached id is taken: neither a new sequence nor a second keep may use it.
  EXPECT_EQ(Start(2).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(engine_->num_sequences(), 0);
  ASSERT_TRUE(Start(3).ok());
  EXPECT_EQ(engine_->KeepSequence(7).code(), StatusCode::kNotFound);
}

INSTANTIATE_TEST_SUITE_P(Policies, PrefixCacheCpTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace millipede
