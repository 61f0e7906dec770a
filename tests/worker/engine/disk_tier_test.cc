// The prefix cache's disk tier: a saved sequence written to a file and read back exactly; a
// truncated or corrupted file (header or rows) detected, never served; the tier's writer
// thread, its entries found again by a new tier on the same directory (a restart), drops, and
// half-written files removed.
#include "worker/engine/disk_tier.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "worker/backend/backend_factory.h"
#include "worker/engine/engine_options.h"

namespace millipede {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kLayers = 2, kHeads = 2, kDim = 4;

ModelConfig Config() {
  ModelConfig c;
  c.num_hidden_layers = kLayers;
  c.num_key_value_heads = kHeads;
  return c;
}

std::unique_ptr<Backend> Cpu() { return std::move(CreateBackend(BackendKind::kCpu)).value(); }

// A sequence of 10 positions on this rank [0, 6) and [8, 12): every layer one part of 10 rows
// of `dtype` whose values tell layer, row and K/V apart.
SavedSequence MakeSaved(Backend& backend, DType dtype = DType::kF32) {
  SequenceOptions o;
  o.capacity = 16;
  o.step_tokens = 8;
  o.policy = DensePolicy(kLayers, kHeads);
  o.decode_rows = 3;
  o.selected_kv = SelectedKvTier::kDevice;
  const std::vector<TokenRange> stored = {{0, 6}, {8, 12}};
  std::vector<std::vector<SavedKvRows>> layers(kLayers);
  for (int64_t l = 0; l < kLayers; ++l) {
    SavedKvRows part{.retention = {}, .ranges = stored, .k = {}, .v = {}};
    part.k = std::move(backend.AllocateHost(dtype, Shape{10, kHeads, kDim})).value();
    part.v = std::move(backend.AllocateHost(dtype, Shape{10, kHeads, kDim})).value();
    for (int64_t i = 0; i < 10 * kHeads * kDim; ++i) {
      StoreFromFloat(part.k.view().data, dtype, i, static_cast<float>(1000 * l + i));
      StoreFromFloat(part.v.view().data, dtype, i, -static_cast<float>(1000 * l + i) / 64);
    }
    layers[static_cast<size_t>(l)].push_back(std::move(part));
  }
  return SavedSequence::FromParts(o, 12, stored, std::move(layers));
}

DiskEntryMeta Meta(uint64_t id) {
  return DiskEntryMeta{.id = id, .key = 77, .model_key = "model m", .tokens = {5, 6, 7},
                       .every_length = false, .lengths = {2, 3}};
}

class DiskTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("millipede_disk_tier_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
  std::unique_ptr<Backend> backend_ = Cpu();
};

void ExpectSameRows(const SavedSequence& a, const SavedSequence& b) {
  ASSERT_EQ(a.num_layers(), b.num_layers());
  for (int64_t l = 0; l < a.num_layers(); ++l) {
    ASSERT_EQ(a.layer(l).size(), b.layer(l).size());
    for (size_t p = 0; p < a.layer(l).size(); ++p) {
      const SavedKvRows &x = a.layer(l)[p], &y = b.layer(l)[p];
      EXPECT_EQ(x.ranges.size(), y.ranges.size());
      ASSERT_EQ(x.NumBytes(), y.NumBytes());
      EXPECT_EQ(std::memcmp(x.k.cview().data, y.k.cview().data, x.k.NumBytes()), 0);
      EXPECT_EQ(std::memcmp(x.v.cview().data, y.v.cview().data, x.v.NumBytes()), 0);
    }
  }
}

TEST_F(DiskTierTest, AFileReadsBackExactly) {
  const SavedSequence saved = MakeSaved(*backend_);
  ASSERT_TRUE(WriteSavedSequenceFile(Path("1.mkv"), Meta(1), saved).ok());
  EXPECT_FALSE(fs::exists(Path("1.mkv.tmp")));
  auto info = ReadSavedSequenceInfo(Path("1.mkv"));
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->meta.id, 1u);
  EXPECT_EQ(info->meta.key, 77u);
  EXPECT_EQ(info->meta.model_key, "model m");
  EXPECT_EQ(info->meta.tokens, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_FALSE(info->meta.every_length);
  EXPECT_EQ(info->meta.lengths, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(info->length, 12);
  EXPECT_EQ(info->stored.size(), 2u);
  EXPECT_EQ(info->row_bytes, saved.NumBytes());
  auto back = ReadSavedSequenceFile(*backend_, Path("1.mkv"), Config());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->length(), 12);
  EXPECT_EQ(back->options().capacity, 16);
  EXPECT_EQ(back->options().decode_rows, 3);
  EXPECT_EQ(back->options().selected_kv, SelectedKvTier::kDevice);
  EXPECT_TRUE(back->options().policy == saved.options().policy);
  ExpectSameRows(*back, saved);
}

// An FP8 (E4M3) cache's rows, a byte each, are written and read back as they are.
TEST_F(DiskTierTest, Fp8RowsReadBackExactly) {
  const SavedSequence saved = MakeSaved(*backend_, DType::kF8E4M3);
  ASSERT_TRUE(WriteSavedSequenceFile(Path("8.mkv"), Meta(8), saved).ok());
  auto back = ReadSavedSequenceFile(*backend_, Path("8.mkv"), Config());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->layer(0)[0].k.cview().dtype, DType::kF8E4M3);
  EXPECT_EQ(back->NumBytes(), saved.NumBytes());
  ExpectSameRows(*back, saved);
}

TEST_F(DiskTierTest, TruncatedAndCorruptedFilesAreNeverServed) {
  const SavedSequence saved = MakeSaved(*backend_);
  for (const char* name : {"1.mkv", "2.mkv", "3.mkv", "4.mkv"})
    ASSERT_TRUE(WriteSavedSequenceFile(Path(name), Meta(1), saved).ok());
  const auto size = static_cast<int64_t>(fs::file_size(Path("1.mkv")));
  // Truncated: the size the header announces is not there.
  fs::resize_file(Path("1.mkv"), static_cast<uintmax_t>(size - 5));
  EXPECT_EQ(ReadSavedSequenceInfo(Path("1.mkv")).status().code(), StatusCode::kIoError);
  EXPECT_EQ(ReadSavedSequenceFile(*backend_, Path("1.mkv"), Config()).status().code(),
            StatusCode::kIoError);
  auto flip = [&](const char* name, int64_t at) {
    std::fstream f(Path(name), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(at);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);
    f.seekp(at);
    f.write(&c, 1);
  };
  // A row byte: the header is fine, the rows' checksum is not.
  flip("2.mkv", size - 40);
  EXPECT_TRUE(ReadSavedSequenceInfo(Path("2.mkv")).ok());
  auto rows = ReadSavedSequenceFile(*backend_, Path("2.mkv"), Config());
  EXPECT_EQ(rows.status().code(), StatusCode::kIoError);
  EXPECT_NE(rows.status().message().find("checksum"), std::string::npos);
  // A header byte, and the magic.
  flip("3.mkv", 30);
  EXPECT_EQ(ReadSavedSequenceInfo(Path("3.mkv")).status().code(), StatusCode::kIoError);
  flip("4.mkv", 2);
  EXPECT_EQ(ReadSavedSequenceInfo(Path("4.mkv")).status().code(), StatusCode::kIoError);
  EXPECT_EQ(ReadSavedSequenceInfo(Path("missing.mkv")).status().code(), StatusCode::kIoError);
}

TEST_F(DiskTierTest, EntriesSurviveANewTierAndBadFilesAreRemoved) {
  {
    auto tier = DiskTier::Open(dir_.string(), 3);
    ASSERT_TRUE(tier.ok()) << tier.status().ToString();
    (*tier)->Write(Meta(5), MakeSaved(*backend_));
    (*tier)->Write(Meta(6), MakeSaved(*backend_));
    // Readable from memory until written; the bytes count either way.
    EXPECT_EQ((*tier)->bytes(), 2 * MakeSaved(*backend_).NumBytes());
    (*tier)->Flush();
    EXPECT_EQ((*tier)->Pending(5), nullptr);
    EXPECT_EQ((*tier)->Collect(), 0);
    EXPECT_EQ((*tier)->Entries().size(), 2u);
    auto read = (*tier)->Read(*backend_, 5, Config());
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    ExpectSameRows(*read, MakeSaved(*backend_));
    (*tier)->Drop(6);
    EXPECT_FALSE(fs::exists(dir_ / "rank-3" / "6.mkv"));
    EXPECT_EQ((*tier)->Read(*backend_, 6, Config()).status().code(), StatusCode::kNotFound);
  }
  // A restart: entry 5 is found again; a half-written file and a corrupted one are removed.
  std::ofstream(dir_ / "rank-3" / "9.mkv.tmp") << "half";
  std::ofstream(dir_ / "rank-3" / "8.mkv") << "garbage";
  std::ofstream(dir_ / "rank-3" / "notes.txt") << "not ours";
  auto tier = DiskTier::Open(dir_.string(), 3);
  ASSERT_TRUE(tier.ok());
  const auto entries = (*tier)->Entries();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].meta.id, 5u);
  EXPECT_FALSE(fs::exists(dir_ / "rank-3" / "9.mkv.tmp"));
  EXPECT_FALSE(fs::exists(dir_ / "rank-3" / "8.mkv"));
  EXPECT_TRUE(fs::exists(dir_ / "rank-3" / "notes.txt"));
  // A file corrupted after the start is dropped when read.
  {
    std::fstream f(dir_ / "rank-3" / "5.mkv", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-12, std::ios::end);
    f.put('\x7f');
  }
  EXPECT_EQ((*tier)->Read(*backend_, 5, Config()).status().code(), StatusCode::kIoError);
  EXPECT_TRUE((*tier)->Entries().empty());
  EXPECT_FALSE(fs::exists(dir_ / "rank-3" / "5.mkv"));
}

// Promote reads entries back on the tier's reader thread: one still being written is read once
// complete, a damaged one fails (and is removed), a dropped one is never handed over, and
// TakePromoted gives each ended read once.
TEST_F(DiskTierTest, PromotionsReadEntriesBackInTheBackground) {
  auto tier = DiskTier::Open(dir_.string(), 0);
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  DiskTier& t = **tier;
  const ModelConfig config = Config();
  for (uint64_t id : {1, 2, 3}) t.Write(Meta(id), MakeSaved(*backend_));
  t.Promote(*backend_, 1, config);  // queued while its file may still be written
  t.Flush();
  {
    std::fstream f(dir_ / "rank-0" / "2.mkv", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-12, std::ios::end);
    f.put('\x7f');
  }
  t.Promote(*backend_, 2, config);
  t.Promote(*backend_, 3, config);
  t.Drop(3);
  t.Promote(*backend_, 4, config);  // never written
  std::vector<DiskTier::Promotion> ended;
  for (int i = 0; i < 500 && ended.size() < 3; ++i) {
    for (DiskTier::Promotion& p : t.TakePromoted()) ended.push_back(std::move(p));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(ended.size(), 3u);
  EXPECT_EQ(ended[0].id, 1u);
  ASSERT_TRUE(ended[0].read.ok()) << ended[0].read.status().ToString();
  ExpectSameRows(*ended[0].read, MakeSaved(*backend_));
  EXPECT_EQ(ended[1].id, 2u);
  EXPECT_EQ(ended[1].read.status().code(), StatusCode::kIoError);
  EXPECT_FALSE(fs::exists(dir_ / "rank-0" / "2.mkv"));
  EXPECT_EQ(ended[2].id, 4u);
  EXPECT_EQ(ended[2].read.status().code(), StatusCode::kNotFound);
  // Entry 1 stays on disk until its owner drops it; entry 3 was dropped, 2 removed.
  ASSERT_EQ(t.Entries().size(), 1u);
  EXPECT_EQ(t.Entries()[0].meta.id, 1u);
  EXPECT_TRUE(t.TakePromoted().empty());
}

// The disk tier's files are keyed by the weights: other random weights, another config or a
// weight file rewritten give another fingerprint; the same weights the same one.
TEST_F(DiskTierTest, WeightsFingerprintTellsWeightsApart) {
  EngineOptions random;
  random.random_config = Config();
  const std::string a = WeightsFingerprint(random);
  EXPECT_EQ(a.size(), 16u);
  EXPECT_EQ(WeightsFingerprint(random), a);
  random.random_weights.seed = 1;
  EXPECT_NE(WeightsFingerprint(random), a);

  EngineOptions dir;
  dir.model_path = dir_.string();
  std::ofstream(dir_ / "config.json") << "{\"hidden_size\": 64}";
  std::ofstream(dir_ / "model.safetensors") << "weights";
  const std::string b = WeightsFingerprint(dir);
  EXPECT_EQ(WeightsFingerprint(dir), b);
  std::ofstream(dir_ / "model.safetensors") << "other weights";
  const std::string c = WeightsFingerprint(dir);
  EXPECT_NE(c, b);
  std::ofstream(dir_ / "config.json") << "{\"hidden_size\": 128}";
  EXPECT_NE(WeightsFingerprint(dir), c);
}

}  // namespace
}  // namespace millipede
