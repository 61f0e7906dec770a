#include "checkpoint/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/safetensors_writer.h"
#include "common/json_util.h"
#include "tests/checkpoint/test_util.h"

namespace millipede {
namespace {

using testing::ExpectErrorContains;
using testing::ReadBytes;
using testing::ScratchDir;

// Fills a tensor with a byte pattern that differs per tensor and per position.
HostTensor PatternTensor(DType dtype, const Shape& shape, int seed) {
  HostTensor t(dtype, shape);
  auto* bytes = t.data<unsigned char>();
  for (size_t i = 0; i < t.NumBytes(); ++i) bytes[i] = static_cast<unsigned char>(i * 31 + seed);
  return t;
}

void ExpectSameTensor(const ConstTensorView& got, const HostTensor& want) {
  EXPECT_EQ(got.dtype, want.dtype());
  EXPECT_EQ(got.shape, want.shape()) << got.shape.ToString();
  ASSERT_EQ(got.NumBytes(), want.NumBytes());
  EXPECT_EQ(std::memcmp(got.data, want.data<unsigned char>(), want.NumBytes()), 0);
}

void RoundTrip(const std::vector<DType>& dtypes) {
  ScratchDir dir;
  std::vector<HostTensor> owned;
  std::vector<NamedTensor> tensors;
  for (size_t i = 0; i < dtypes.size(); ++i) {
    owned.push_back(
        PatternTensor(dtypes[i], {3, static_cast<int64_t>(i) + 2}, static_cast<int>(i)));
  }
  for (size_t i = 0; i < dtypes.size(); ++i) {
    tensors.push_back({std::string("t_") + DTypeName(dtypes[i]), std::as_const(owned[i]).view()});
  }
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "ünïcode"}};
  const std::string path = dir.File("x.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, tensors, metadata).ok());

  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(file->metadata(), metadata);
  ASSERT_EQ(file->tensors().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    // tensors() is in offset order, which the writer makes the given order.
    EXPECT_EQ(file->tensors()[i].name, tensors[i].first);
    auto view = file->Get(tensors[i].first);
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    ExpectSameTensor(*view, owned[i]);
  }
}

TEST(SafetensorsRoundTripTest, FloatDTypes) {
  RoundTrip({DType::kF32, DType::kF16, DType::kBF16, DType::kF64});
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64}) RoundTrip({d});
}

TEST(SafetensorsRoundTripTest, IntegerAndBoolDTypes) {
  RoundTrip({DType::kI8, DType::kU8, DType::kI16, DType::kI32, DType::kI64, DType::kBool});
  for (DType d : {DType::kI8, DType::kU8, DType::kI16, DType::kI32, DType::kI64, DType::kBool}) {
    RoundTrip({d});
  }
}

TEST(SafetensorsRoundTripTest, FloatValuesSurviveExactly) {
  ScratchDir dir;
  HostTensor t(DType::kBF16, {4});
  const float values[] = {1.0f, -2.5f, 3.140625f, 0.0f};
  for (int i = 0; i < 4; ++i) StoreFromFloat(t.data<void>(), DType::kBF16, i, values[i]);
  ASSERT_TRUE(WriteSafetensors(dir.File("v.safetensors"), {{"w", AsConst(t.view())}}).ok());
  auto file = SafetensorsFile::Open(dir.File("v.safetensors"));
  ASSERT_TRUE(file.ok());
  ConstTensorView v = *file->Get("w");
  for (int i = 0; i < 4; ++i) EXPECT_EQ(LoadAsFloat(v.data, DType::kBF16, i), values[i]);
}

TEST(SafetensorsRoundTripTest, EmptyScalarAndZeroSizeTensors) {
  ScratchDir dir;
  const HostTensor scalar = PatternTensor(DType::kF32, {}, 1);
  const HostTensor empty = PatternTensor(DType::kF16, {0}, 2);
  const HostTensor zero_mid = PatternTensor(DType::kI32, {3, 0, 2}, 3);
  const HostTensor after = PatternTensor(DType::kU8, {5}, 4);
  const std::string path = dir.File("z.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"scalar", scalar.view()},
                                      {"empty", empty.view()},
                                      {"zero_mid", zero_mid.view()},
                                      {"after", after.view()}})
                  .ok());
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  ExpectSameTensor(*file->Get("scalar"), scalar);
  EXPECT_EQ(file->Get("scalar")->shape.rank, 0);
  EXPECT_EQ(file->Get("empty")->shape, Shape({0}));
  EXPECT_EQ(file->Get("zero_mid")->shape, Shape({3, 0, 2}));
  ExpectSameTensor(*file->Get("after"), after);

  // A file with no tensors at all is valid too.
  ASSERT_TRUE(WriteSafetensors(dir.File("none.safetensors"), {}).ok());
  auto none = SafetensorsFile::Open(dir.File("none.safetensors"));
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_TRUE(none->tensors().empty());
  EXPECT_TRUE(none->metadata().empty());
}

TEST(SafetensorsWriterTest, LayoutMatchesTheReferenceWriter) {
  ScratchDir dir;
  const HostTensor a =
      PatternTensor(DType::kBF16, {3}, 1);  // 6 bytes: the next tensor is unaligned
  const HostTensor b = PatternTensor(DType::kF32, {2, 2}, 2);
  const std::string path = dir.File("l.safetensors");
  ASSERT_TRUE(
      WriteSafetensors(path, {{"b_first", a.view()}, {"a_second", b.view()}}, {{"format", "pt"}})
          .ok());
  const std::string bytes = ReadBytes(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ(n % 8, 0u);
  ASSERT_EQ(bytes.size(), 8 + n + 6 + 16);
  const std::string header = bytes.substr(8, n);
  const size_t close = header.find_last_of('}');
  EXPECT_EQ(header.find_first_not_of(' ', close + 1), std::string::npos) << "pad must be spaces";

  auto j = ParseJson(header, "header");
  ASSERT_TRUE(j.ok());
  EXPECT_EQ((*j)["__metadata__"]["format"], "pt");
  EXPECT_EQ((*j)["b_first"]["dtype"], "BF16");
  EXPECT_EQ((*j)["b_first"]["shape"], Json::array({3}));
  EXPECT_EQ((*j)["b_first"]["data_offsets"], Json::array({0, 6}));
  EXPECT_EQ((*j)["a_second"]["data_offsets"], Json::array({6, 22}));
  EXPECT_EQ(std::memcmp(bytes.data() + 8 + n, a.data<unsigned char>(), 6), 0);
  EXPECT_EQ(std::memcmp(bytes.data() + 8 + n + 6, b.data<unsigned char>(), 16), 0);

  // Only the final file remains: the temporary file was renamed, not left behind.
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 1);
}

TEST(SafetensorsWriterTest, OverwritesAnExistingFile) {
  ScratchDir dir;
  const HostTensor a = PatternTensor(DType::kF32, {8}, 1);
  const HostTensor b = PatternTensor(DType::kF32, {2}, 2);
  const std::string path = dir.File("o.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"a", a.view()}}).ok());
  ASSERT_TRUE(WriteSafetensors(path, {{"b", b.view()}}).ok());
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok());
  EXPECT_FALSE(file->Has("a"));
  ExpectSameTensor(*file->Get("b"), b);
}

TEST(SafetensorsWriterTest, RejectsBadInput) {
  ScratchDir dir;
  const std::string path = dir.File("bad.safetensors");
  const HostTensor t = PatternTensor(DType::kF32, {2}, 1);
  ExpectErrorContains(WriteSafetensors(path, {{"w", t.view()}, {"w", t.view()}}),
                      {path, "duplicate tensor name \"w\""});
  ExpectErrorContains(WriteSafetensors(path, {{"__metadata__", t.view()}}), {"reserved"});
  ConstTensorView null_view{nullptr, DType::kF32, Shape({2})};
  ExpectErrorContains(WriteSafetensors(path, {{"n", null_view}}), {"\"n\"", "null data"});
  ConstTensorView negative{t.data<void>(), DType::kF32, Shape({-2})};
  ExpectErrorContains(WriteSafetensors(path, {{"neg", negative}}), {"\"neg\"", "negative"});
  ExpectErrorContains(WriteSafetensors(path, {{"bad\xff", t.view()}}), {"not valid UTF-8"});
  ExpectErrorContains(WriteSafetensors(path, {{"w", t.view()}}, {{"k", "\xc3"}}),
                      {"metadata", "not valid UTF-8"});
  ExpectErrorContains(WriteSafetensors(dir.File("no/such/dir/x.safetensors"), {{"w", t.view()}}),
                      {"cannot create"});
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(SafetensorsFileTest, LookupErrorsNameTheTensorAndFile) {
  ScratchDir dir;
  const HostTensor t = PatternTensor(DType::kF32, {2}, 1);
  const std::string path = dir.File("f.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"present", t.view()}}).ok());
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok());
  EXPECT_TRUE(file->Has("present"));
  EXPECT_EQ(file->Find("absent"), nullptr);
  Status missing = file->Get("absent").status();
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  ExpectErrorContains(missing, {path, "\"absent\""});

  Status no_file = SafetensorsFile::Open(dir.File("nope.safetensors")).status();
  EXPECT_EQ(no_file.code(), StatusCode::kNotFound);
  ExpectErrorContains(no_file, {"nope.safetensors"});
}

TEST(SafetensorsFileTest, MovedFileKeepsViewsValid) {
  ScratchDir dir;
  const HostTensor t = PatternTensor(DType::kI16, {4, 4}, 7);
  ASSERT_TRUE(WriteSafetensors(dir.File("m.safetensors"), {{"w", t.view()}}).ok());
  auto opened = SafetensorsFile::Open(dir.File("m.safetensors"));
  ASSERT_TRUE(opened.ok());
  ConstTensorView before = *opened->Get("w");
  SafetensorsFile moved = std::move(opened).value();
  ConstTensorView after = *moved.Get("w");
  EXPECT_EQ(before.data, after.data);
  ExpectSameTensor(after, t);
}

}  // namespace
}  // namespace millipede
