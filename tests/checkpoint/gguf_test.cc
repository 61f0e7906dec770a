// GgufFile on hand-built files: every metadata type (nested arrays included), the typed getters,
// versions 2 and 3, alignment, tensor placement, and a table of malformed files that must each be
// refused with InvalidArgument naming the file and the offending key or tensor.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/gguf.h"
#include "tests/checkpoint/test_util.h"

namespace millipede {
namespace {

using testing::ExpectErrorContains;
using testing::ScratchDir;
using testing::WriteBytes;
using VT = GgufValue::Type;

// ---- Little-endian encoders -------------------------------------------------------------------

template <typename T>
std::string Le(T v) {
  std::string s(sizeof(T), '\0');
  std::memcpy(s.data(), &v, sizeof(T));
  return s;
}
std::string U32(uint32_t v) { return Le(v); }
std::string U64(uint64_t v) { return Le(v); }
std::string Str(std::string_view s) { return U64(s.size()) + std::string(s); }
std::string Type(VT t) { return U32(static_cast<uint32_t>(t)); }

// An array value's payload: element type, count, the encoded elements.
std::string ArrayPayload(VT element_type, const std::vector<std::string>& elements) {
  std::string s = Type(element_type) + U64(elements.size());
  for (const std::string& e : elements) s += e;
  return s;
}
// A nested array element (no type tag of its own beyond its element type and count).
std::string InnerArray(VT element_type, const std::vector<std::string>& elements) {
  return ArrayPayload(element_type, elements);
}

// One key/value: the key, the value type, the payload.
std::string Kv(std::string_view key, VT type, const std::string& payload) {
  return Str(key) + Type(type) + payload;
}
std::string KvU32(std::string_view key, uint32_t v) { return Kv(key, VT::kUint32, U32(v)); }
std::string KvString(std::string_view key, std::string_view v) {
  return Kv(key, VT::kString, Str(v));
}

// One tensor info.
std::string Info(std::string_view name, const std::vector<uint64_t>& ne, uint32_t type,
                 uint64_t offset) {
  std::string s = Str(name) + U32(static_cast<uint32_t>(ne.size()));
  for (uint64_t n : ne) s += U64(n);
  return s + U32(type) + U64(offset);
}
constexpr uint32_t kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ8_0 = 8, kQ4_K = 12;

// A GGUF image: header, metadata, tensor infos, padding to `alignment`, data.
struct Image {
  uint32_t version = 3;
  std::vector<std::string> kvs;
  std::vector<std::string> infos;
  std::optional<uint64_t> n_kv, n_tensors;  // the counts written, when not the true ones
  uint64_t alignment = 32;
  std::string data;

  std::string Header() const {
    std::string s = "GGUF" + U32(version) + U64(n_tensors.value_or(infos.size())) +
                    U64(n_kv.value_or(kvs.size()));
    for (const std::string& kv : kvs) s += kv;
    for (const std::string& info : infos) s += info;
    return s;
  }
  // Where the data section starts.
  size_t DataStart() const {
    size_t end = Header().size();
    return (end + alignment - 1) / alignment * alignment;
  }
  std::string Bytes() const {
    std::string s = Header();
    s.resize(DataStart(), '\0');
    return s + data;
  }
};

// A small valid file: two keys and two tensors (F32 [3, 2] and Q8_0 [32, 2]).
Image SmallImage() {
  Image im;
  im.kvs = {KvString("general.architecture", "llama"), KvU32("llama.block_count", 2)};
  im.infos = {Info("a.weight", {3, 2}, kF32, 0), Info("b.weight", {32, 2}, kQ8_0, 32)};
  im.data = std::string(32, '\x11') + std::string(68, '\x22');  // 24 bytes + pad, then 68
  return im;
}

class GgufTest : public ::testing::Test {
 protected:
  StatusOr<GgufFile> OpenBytes(const std::string& bytes) {
    WriteBytes(path_, bytes);
    return GgufFile::Open(path_);
  }
  StatusOr<GgufFile> OpenImage(const Image& im) { return OpenBytes(im.Bytes()); }
  // Expects InvalidArgument naming the file and containing every one of `parts`.
  void ExpectInvalid(const std::string& bytes, std::initializer_list<std::string_view> parts) {
    StatusOr<GgufFile> f = OpenBytes(bytes);
    ASSERT_FALSE(f.ok()) << "accepted; expected an error containing " << *parts.begin();
    EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument) << f.status().ToString();
    ExpectErrorContains(f.status(), {path_});
    ExpectErrorContains(f.status(), parts);
  }
  void ExpectInvalid(const Image& im, std::initializer_list<std::string_view> parts) {
    ExpectInvalid(im.Bytes(), parts);
  }

  ScratchDir dir_;
  std::string path_ = dir_.File("test.gguf");
};

// ---- Well-formed files --------------------------------------------------------------------------

TEST_F(GgufTest, EveryMetadataType) {
  Image im;
  im.kvs = {
      Kv("u8", VT::kUint8, Le<uint8_t>(250)),
      Kv("i8", VT::kInt8, Le<int8_t>(-100)),
      Kv("u16", VT::kUint16, Le<uint16_t>(65535)),
      Kv("i16", VT::kInt16, Le<int16_t>(-32768)),
      Kv("u32", VT::kUint32, U32(4000000000u)),
      Kv("i32", VT::kInt32, Le<int32_t>(-7)),
      Kv("u64", VT::kUint64, U64(std::numeric_limits<uint64_t>::max())),
      Kv("i64", VT::kInt64, Le<int64_t>(std::numeric_limits<int64_t>::min())),
      Kv("f32", VT::kFloat32, Le<float>(0.1f)),
      Kv("f64", VT::kFloat64, Le<double>(-2.5e300)),
      Kv("yes", VT::kBool, Le<uint8_t>(1)),
      Kv("no", VT::kBool, Le<uint8_t>(0)),
      Kv("s", VT::kString, Str("h\xc3\xa9llo")),
      Kv("empty_s", VT::kString, Str("")),
      Kv("arr_i16", VT::kArray, ArrayPayload(VT::kInt16, {Le<int16_t>(-1), Le<int16_t>(2)})),
      Kv("arr_s", VT::kArray, ArrayPayload(VT::kString, {Str("x"), Str(""), Str("yz")})),
      Kv("arr_f64", VT::kArray, ArrayPayload(VT::kFloat64, {Le<double>(1.5)})),
      Kv("arr_bool", VT::kArray, ArrayPayload(VT::kBool, {Le<uint8_t>(1), Le<uint8_t>(0)})),
      Kv("arr_empty", VT::kArray, ArrayPayload(VT::kUint32, {})),
      // [[1, 2], ["a"], [[true]]]: arrays of arrays, each inner one with its own element type.
      Kv("nested", VT::kArray,
         ArrayPayload(VT::kArray,
                      {InnerArray(VT::kInt32, {Le<int32_t>(1), Le<int32_t>(2)}),
                       InnerArray(VT::kString, {Str("a")}),
                       InnerArray(VT::kArray, {InnerArray(VT::kBool, {Le<uint8_t>(1)})})})),
  };
  StatusOr<GgufFile> f = OpenImage(im);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->path(), path_);
  EXPECT_TRUE(f->tensors().empty());
  const std::vector<std::string> keys = {"u8",  "i8",      "u16",     "i16",     "u32",
                                         "i32", "u64",     "i64",     "f32",     "f64",
                                         "yes", "no",      "s",       "empty_s", "arr_i16",
                                         "arr_s", "arr_f64", "arr_bool", "arr_empty", "nested"};
  EXPECT_EQ(f->keys(), keys);

  auto expect_u = [&](const char* key, VT type, uint64_t u) {
    const GgufValue* v = f->Find(key);
    ASSERT_NE(v, nullptr) << key;
    EXPECT_EQ(v->type, type) << key;
    EXPECT_EQ(v->u, u) << key;
  };
  auto expect_i = [&](const char* key, VT type, int64_t i) {
    const GgufValue* v = f->Find(key);
    ASSERT_NE(v, nullptr) << key;
    EXPECT_EQ(v->type, type) << key;
    EXPECT_EQ(v->i, i) << key;
  };
  expect_u("u8", VT::kUint8, 250);
  expect_i("i8", VT::kInt8, -100);
  expect_u("u16", VT::kUint16, 65535);
  expect_i("i16", VT::kInt16, -32768);
  expect_u("u32", VT::kUint32, 4000000000u);
  expect_i("i32", VT::kInt32, -7);
  expect_u("u64", VT::kUint64, std::numeric_limits<uint64_t>::max());
  expect_i("i64", VT::kInt64, std::numeric_limits<int64_t>::min());
  expect_u("yes", VT::kBool, 1);
  expect_u("no", VT::kBool, 0);
  EXPECT_EQ(f->Find("f32")->type, VT::kFloat32);
  EXPECT_EQ(f->Find("f32")->f, static_cast<double>(0.1f));
  EXPECT_EQ(f->Find("f64")->type, VT::kFloat64);
  EXPECT_EQ(f->Find("f64")->f, -2.5e300);
  EXPECT_EQ(f->Find("s")->s, "h\xc3\xa9llo");
  EXPECT_EQ(f->Find("empty_s")->type, VT::kString);
  EXPECT_EQ(f->Find("empty_s")->s, "");
  EXPECT_EQ(f->Find("missing"), nullptr);

  const GgufValue* arr = f->Find("arr_s");
  EXPECT_EQ(arr->type, VT::kArray);
  EXPECT_EQ(arr->array_type, VT::kString);
  ASSERT_EQ(arr->array.size(), 3u);
  EXPECT_EQ(arr->array[0].type, VT::kString);
  EXPECT_EQ(arr->array[2].s, "yz");
  EXPECT_EQ(f->Find("arr_i16")->array[0].i, -1);
  EXPECT_EQ(f->Find("arr_bool")->array[1].u, 0u);
  EXPECT_EQ(f->Find("arr_empty")->array_type, VT::kUint32);
  EXPECT_TRUE(f->Find("arr_empty")->array.empty());

  const GgufValue* nested = f->Find("nested");
  EXPECT_EQ(nested->array_type, VT::kArray);
  ASSERT_EQ(nested->array.size(), 3u);
  EXPECT_EQ(nested->array[0].type, VT::kArray);
  EXPECT_EQ(nested->array[0].array_type, VT::kInt32);
  ASSERT_EQ(nested->array[0].array.size(), 2u);
  EXPECT_EQ(nested->array[0].array[1].i, 2);
  EXPECT_EQ(nested->array[1].array_type, VT::kString);
  EXPECT_EQ(nested->array[1].array[0].s, "a");
  EXPECT_EQ(nested->array[2].array_type, VT::kArray);
  EXPECT_EQ(nested->array[2].array[0].array_type, VT::kBool);
  EXPECT_EQ(nested->array[2].array[0].array[0].u, 1u);
}

TEST_F(GgufTest, TypedGetters) {
  Image im;
  im.kvs = {
      Kv("u8", VT::kUint8, Le<uint8_t>(200)),
      Kv("i16", VT::kInt16, Le<int16_t>(-300)),
      Kv("u64_big", VT::kUint64, U64(uint64_t{1} << 63)),
      Kv("u64_ok", VT::kUint64, U64(12345678901234ull)),
      Kv("f32", VT::kFloat32, Le<float>(0.25f)),
      Kv("f64", VT::kFloat64, Le<double>(1e-300)),
      Kv("b", VT::kBool, Le<uint8_t>(1)),
      Kv("s", VT::kString, Str("text")),
      Kv("strs", VT::kArray, ArrayPayload(VT::kString, {Str("a"), Str("b")})),
      Kv("i32s", VT::kArray, ArrayPayload(VT::kInt32, {Le<int32_t>(-1), Le<int32_t>(5)})),
      Kv("u64s", VT::kArray, ArrayPayload(VT::kUint64, {U64(1), U64(~uint64_t{0})})),
      Kv("f32s", VT::kArray, ArrayPayload(VT::kFloat32, {Le<float>(0.5f), Le<float>(-2)})),
      Kv("f64s", VT::kArray, ArrayPayload(VT::kFloat64, {Le<double>(0.1)})),
      Kv("u8s", VT::kArray, ArrayPayload(VT::kUint8, {Le<uint8_t>(7)})),
  };
  StatusOr<GgufFile> f = OpenImage(im);
  ASSERT_TRUE(f.ok()) << f.status().ToString();

  EXPECT_EQ(*f->GetInt("u8"), 200);
  EXPECT_EQ(*f->GetInt("i16"), -300);
  EXPECT_EQ(*f->GetInt("u64_ok"), 12345678901234ll);
  EXPECT_EQ(*f->GetFloat("f32"), 0.25);
  EXPECT_EQ(*f->GetFloat("f64"), 1e-300);
  EXPECT_EQ(*f->GetFloat("u8"), 200.0);  // floats accept integers
  EXPECT_EQ(*f->GetFloat("i16"), -300.0);
  EXPECT_TRUE(*f->GetBool("b"));
  EXPECT_EQ(*f->GetString("s"), "text");
  EXPECT_EQ(*f->GetStringArray("strs"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(*f->GetIntArray("i32s"), (std::vector<int64_t>{-1, 5}));
  EXPECT_EQ(*f->GetIntArray("u8s"), (std::vector<int64_t>{7}));
  EXPECT_EQ(*f->GetFloatArray("f32s"), (std::vector<float>{0.5f, -2.0f}));
  EXPECT_EQ(*f->GetFloatArray("f64s"), (std::vector<float>{0.1f}));
  EXPECT_EQ(*f->GetFloatArray("i32s"), (std::vector<float>{-1.0f, 5.0f}));

  auto expect_mistyped = [&](const Status& s, std::initializer_list<std::string_view> parts) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    ExpectErrorContains(s, {path_});
    ExpectErrorContains(s, parts);
  };
  // Every getter names the key and both types when the stored type does not convert.
  expect_mistyped(f->GetInt("u64_big").status(), {"\"u64_big\"", "uint64", "int64"});
  expect_mistyped(f->GetInt("s").status(), {"\"s\"", "string", "int64"});
  expect_mistyped(f->GetInt("f32").status(), {"\"f32\"", "float32", "int64"});
  expect_mistyped(f->GetInt("b").status(), {"\"b\"", "bool", "int64"});
  expect_mistyped(f->GetFloat("b").status(), {"\"b\"", "bool", "float64"});
  expect_mistyped(f->GetFloat("s").status(), {"\"s\"", "string", "float64"});
  expect_mistyped(f->GetBool("u8").status(), {"\"u8\"", "uint8", "bool"});
  expect_mistyped(f->GetString("u8").status(), {"\"u8\"", "uint8", "string"});
  expect_mistyped(f->GetString("strs").status(), {"\"strs\"", "array of string", "string"});
  expect_mistyped(f->GetStringArray("i32s").status(),
                  {"\"i32s\"", "array of int32", "array of string"});
  expect_mistyped(f->GetStringArray("s").status(), {"\"s\"", "string", "array of string"});
  expect_mistyped(f->GetIntArray("f32s").status(),
                  {"\"f32s\"", "array of float32", "array of int64"});
  expect_mistyped(f->GetIntArray("u64s").status(), {"\"u64s\"", "element 1", "int64"});
  expect_mistyped(f->GetFloatArray("strs").status(),
                  {"\"strs\"", "array of string", "array of float32"});
  expect_mistyped(f->GetFloatArray("f32").status(), {"\"f32\"", "float32", "array of float32"});

  for (const Status& s : {f->GetInt("nope").status(), f->GetString("nope").status(),
                          f->GetFloat("nope").status(), f->GetBool("nope").status(),
                          f->GetStringArray("nope").status(), f->GetIntArray("nope").status(),
                          f->GetFloatArray("nope").status()}) {
    EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
    ExpectErrorContains(s, {path_, "\"nope\""});
  }
}

TEST_F(GgufTest, TensorsAndTheDefaultAlignment) {
  Image im = SmallImage();
  const std::string bytes = im.Bytes();
  StatusOr<GgufFile> f = OpenBytes(bytes);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ(f->tensors().size(), 2u);
  const size_t data_start = im.DataStart();
  EXPECT_EQ(data_start % 32, 0u);
  EXPECT_GT(data_start, im.Header().size());  // padding was needed

  const GgufTensorInfo& a = f->tensors()[0];
  EXPECT_EQ(a.name, "a.weight");
  EXPECT_EQ(a.ne, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(a.type, GgmlType::kF32);
  EXPECT_EQ(a.offset, 0u);
  EXPECT_EQ(a.num_elements, 6);
  EXPECT_EQ(a.num_bytes, 24u);
  const GgufTensorInfo& b = f->tensors()[1];
  EXPECT_EQ(b.type, GgmlType::kQ8_0);
  EXPECT_EQ(b.num_elements, 64);
  EXPECT_EQ(b.num_bytes, 68u);  // 2 blocks of 34 bytes
  EXPECT_EQ(b.offset, 32u);
  EXPECT_EQ(f->FindTensor("b.weight"), &b);
  EXPECT_EQ(f->FindTensor("c.weight"), nullptr);
  // The data pointers point at the bytes of the data section.
  EXPECT_EQ(b.data - a.data, 32);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(a.data), 24), bytes.substr(data_start, 24));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(b.data), 68),
            bytes.substr(data_start + 32, 68));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data) % 32, 0u);

  // Moving the file keeps the tensors' data pointers valid.
  GgufFile moved = std::move(*f);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(moved.tensors()[1].data), 68),
            bytes.substr(data_start + 32, 68));
}

TEST_F(GgufTest, CustomAlignment) {
  for (uint32_t alignment : {1u, 8u, 64u, 4096u}) {
    Image im;
    im.alignment = alignment;
    im.kvs = {KvU32("general.alignment", alignment)};
    const uint64_t second = std::max<uint64_t>(alignment, 16);
    im.infos = {Info("x", {4}, kF32, 0), Info("y", {8}, kF16, second)};
    im.data = std::string(second, '\x01') + std::string(16, '\x02');
    StatusOr<GgufFile> f = OpenImage(im);
    ASSERT_TRUE(f.ok()) << alignment << ": " << f.status().ToString();
    EXPECT_EQ(f->alignment(), alignment);
    EXPECT_EQ(f->tensors()[1].data - f->tensors()[0].data, static_cast<ptrdiff_t>(second));
    EXPECT_EQ(f->tensors()[0].data[0], 1);
    EXPECT_EQ(f->tensors()[1].data[0], 2);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(f->tensors()[0].data) % alignment, 0u);
  }
}

TEST_F(GgufTest, VersionTwoReadsAsVersionThree) {
  Image im = SmallImage();
  im.version = 2;
  StatusOr<GgufFile> f2 = OpenImage(im);
  ASSERT_TRUE(f2.ok()) << f2.status().ToString();
  EXPECT_EQ(f2->version(), 2u);
  EXPECT_EQ(*f2->GetString("general.architecture"), "llama");
  ASSERT_EQ(f2->tensors().size(), 2u);
  EXPECT_EQ(f2->tensors()[1].num_bytes, 68u);
}

TEST_F(GgufTest, MetadataOnlyFileNeedsNoDataSection) {
  Image im;
  im.kvs = {KvString("general.name", "x")};
  StatusOr<GgufFile> f = OpenBytes(im.Header());  // no padding after the header
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(*f->GetString("general.name"), "x");
}

TEST_F(GgufTest, MissingFileIsNotFound) {
  StatusOr<GgufFile> f = GgufFile::Open(dir_.File("absent.gguf"));
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
  ExpectErrorContains(f.status(), {"absent.gguf"});
}

TEST_F(GgufTest, TypeNamesAndSizes) {
  EXPECT_STREQ(GgmlTypeName(GgmlType::kQ4_K), "Q4_K");
  EXPECT_STREQ(GgmlTypeName(GgmlType::kBF16), "BF16");
  EXPECT_STREQ(GgmlTypeName(static_cast<GgmlType>(4)), "unknown");
  EXPECT_EQ(GgmlBlockElements(GgmlType::kF16), 1);
  EXPECT_EQ(GgmlBlockBytes(GgmlType::kF16), 2);
  EXPECT_EQ(GgmlBlockElements(GgmlType::kQ5_1), 32);
  EXPECT_EQ(GgmlBlockBytes(GgmlType::kQ5_1), 24);
  EXPECT_EQ(GgmlBlockElements(GgmlType::kQ6_K), 256);
  EXPECT_EQ(GgmlBlockBytes(GgmlType::kQ6_K), 210);
  EXPECT_EQ(GgmlBlockBytes(GgmlType::kQ2_K), 84);
  EXPECT_EQ(GgmlBlockBytes(GgmlType::kQ3_K), 110);
  EXPECT_EQ(GgmlBlockBytes(GgmlType::kQ4_K), 144);
  EXPECT_EQ(GgmlBlockBytes(GgmlType::kQ5_K), 176);
  EXPECT_EQ(GgmlBlockElements(static_cast<GgmlType>(99)), 0);
  EXPECT_STREQ(GgufValueTypeName(VT::kFloat64), "float64");
  EXPECT_STREQ(GgufValueTypeName(static_cast<VT>(13)), "unknown");
}

// ---- Malformed files ----------------------------------------------------------------------------

TEST_F(GgufTest, BadMagicAndVersions) {
  ExpectInvalid("", {"too short (0 bytes)"});
  ExpectInvalid("GGU", {"too short (3 bytes)"});
  std::string bytes = SmallImage().Bytes();
  ExpectInvalid("GGUX" + bytes.substr(4), {"bad magic"});
  ExpectInvalid("\x7f" "ELF" + bytes.substr(4), {"bad magic", "7f 45 4c 46"});

  Image im = SmallImage();
  im.version = 1;
  ExpectInvalid(im, {"GGUF version 1 is not supported"});
  im.version = 4;
  ExpectInvalid(im, {"unsupported GGUF version 4"});
  im.version = 0;
  ExpectInvalid(im, {"unsupported GGUF version 0"});
  // A big-endian file: its version field reads byte-swapped.
  for (uint32_t v : {2u, 3u}) {
    im.version = __builtin_bswap32(v);
    ExpectInvalid(im, {"big-endian", "version " + std::to_string(v)});
  }
}

TEST_F(GgufTest, TruncatedAnywhere) {
  Image im = SmallImage();
  im.kvs.insert(im.kvs.begin(), KvString("general.description", std::string(80, 'd')));
  im.kvs.push_back(Kv("tokens", VT::kArray, ArrayPayload(VT::kString, {Str("ab"), Str("c")})));
  im.kvs.push_back(Kv("f", VT::kFloat64, Le<double>(1.0)));
  const std::string bytes = im.Bytes();
  ASSERT_TRUE(OpenBytes(bytes).ok());
  // Every strict prefix is refused (the last tensor ends the file).
  for (size_t n = 0; n < bytes.size(); ++n) {
    StatusOr<GgufFile> f = OpenBytes(bytes.substr(0, n));
    ASSERT_FALSE(f.ok()) << "prefix of " << n << " bytes accepted";
    ASSERT_EQ(f.status().code(), StatusCode::kInvalidArgument)
        << n << ": " << f.status().ToString();
  }
  // Each region names what it was reading. The counts are checked first against the smallest
  // size their entries could have, so a file cut early fails on those.
  ExpectInvalid(bytes.substr(0, 6), {"truncated", "version"});
  ExpectInvalid(bytes.substr(0, 12), {"truncated", "tensor count"});
  ExpectInvalid(bytes.substr(0, 20), {"truncated", "metadata count"});
  ExpectInvalid(bytes.substr(0, 30), {"metadata count 5 cannot fit in the 6 bytes"});
  const size_t description_text = 24 + 8 + 19 + 4 + 8;
  ExpectInvalid(bytes.substr(0, description_text + 40),
                {"\"general.description\"", "string value", "claims 80 bytes", "only 40 left"});
  const size_t infos_start = im.Header().size() - im.infos[0].size() - im.infos[1].size();
  const size_t f_value = infos_start - 8;
  ExpectInvalid(bytes.substr(0, f_value + 3), {"\"f\"", "truncated", "float64 value"});
  const size_t tokens_end = f_value - 4 - 8 - 1;
  ExpectInvalid(bytes.substr(0, tokens_end - 1), {"\"tokens\"", "string value"});
  ExpectInvalid(bytes.substr(0, infos_start + 4), {"tensor count 2 cannot fit"});
  ExpectInvalid(bytes.substr(0, infos_start + 70), {"\"b.weight\"", "truncated", "ne"});
  ExpectInvalid(bytes.substr(0, im.Header().size() - 3), {"\"b.weight\"", "offset"});
  ExpectInvalid(bytes.substr(0, im.Header().size() + 1), {"\"a.weight\"", "end past the end"});
  ExpectInvalid(bytes.substr(0, bytes.size() - 1), {"\"b.weight\"", "end past the end"});
}

TEST_F(GgufTest, HugeCountsAndLengths) {
  Image im = SmallImage();
  im.n_kv = uint64_t{1} << 60;
  ExpectInvalid(im, {"metadata count 1152921504606846976"});
  im.n_kv = ~uint64_t{0};
  ExpectInvalid(im, {"metadata count"});
  im.n_kv.reset();
  im.n_tensors = uint64_t{1} << 60;
  ExpectInvalid(im, {"tensor count 1152921504606846976"});
  im.n_tensors = 3;  // one more than there are: the infos run into the data section
  ExpectInvalid(im, {"tensor"});

  // An array claiming 2^60 elements of each size; an array of arrays claiming as many.
  for (VT t : {VT::kUint8, VT::kUint64, VT::kString, VT::kArray}) {
    Image a;
    a.kvs = {Kv("big.array", VT::kArray, Type(t) + U64(uint64_t{1} << 60) + std::string(64, 0))};
    ExpectInvalid(a, {"\"big.array\"", "array of 1152921504606846976"});
  }
  // Strings claiming 2^63 bytes: a key, a value, an array element, a tensor name.
  const std::string huge = U64(uint64_t{1} << 63);
  Image k;
  k.kvs = {huge + "abc"};
  ExpectInvalid(k, {"metadata entry 0", "key", "9223372036854775808"});
  Image v;
  v.kvs = {Str("general.name") + Type(VT::kString) + huge + "abc"};
  ExpectInvalid(v, {"\"general.name\"", "9223372036854775808"});
  Image e;
  e.kvs = {Kv("tokens", VT::kArray, Type(VT::kString) + U64(2) + Str("a") + huge + "bc")};
  ExpectInvalid(e, {"\"tokens\"", "9223372036854775808"});
  Image n;
  n.infos = {huge + std::string(40, 'x')};
  ExpectInvalid(n, {"tensor info 0", "name", "9223372036854775808"});
}

TEST_F(GgufTest, MetadataValueBudget) {
  // 2^24 one-byte elements plus the key itself: one value over the limit.
  Image im;
  im.kvs = {Kv("huge", VT::kArray,
               Type(VT::kUint8) + U64(uint64_t{1} << 24) + std::string(size_t{1} << 24, 0))};
  ExpectInvalid(im, {"\"huge\"", "limit of 16777216 metadata values"});
}

TEST_F(GgufTest, BadValueTypes) {
  Image im;
  im.kvs = {Str("odd.key") + U32(13) + U32(0)};
  ExpectInvalid(im, {"\"odd.key\"", "unknown value type 13"});
  im.kvs = {Str("odd.key") + U32(0xffffffffu) + U32(0)};
  ExpectInvalid(im, {"\"odd.key\"", "unknown value type 4294967295"});
  im.kvs = {Kv("odd.array", VT::kArray, U32(99) + U64(1) + U32(0))};
  ExpectInvalid(im, {"\"odd.array\"", "unknown array element type 99"});
  im.kvs = {Kv("flag", VT::kBool, Le<uint8_t>(2))};
  ExpectInvalid(im, {"\"flag\"", "bool value 2"});
}

TEST_F(GgufTest, ArrayNestingDepth) {
  // `levels` arrays inside each other, the innermost holding one uint8.
  auto nested = [](int levels) {
    std::string payload = ArrayPayload(VT::kUint8, {Le<uint8_t>(7)});
    for (int i = 1; i < levels; ++i) payload = ArrayPayload(VT::kArray, {payload});
    return payload;
  };
  Image ok;
  ok.kvs = {Kv("deep", VT::kArray, nested(8))};
  StatusOr<GgufFile> f = OpenImage(ok);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const GgufValue* v = f->Find("deep");
  for (int i = 1; i < 8; ++i) v = &v->array[0];
  EXPECT_EQ(v->array_type, VT::kUint8);
  EXPECT_EQ(v->array[0].u, 7u);

  Image too_deep;
  too_deep.kvs = {Kv("deeper", VT::kArray, nested(9))};
  ExpectInvalid(too_deep, {"\"deeper\"", "nested more than 8"});
}

TEST_F(GgufTest, BadTensorInfos) {
  auto with = [](const std::string& info, size_t data_bytes = 4096) {
    Image im;
    im.infos = {info};
    im.data = std::string(data_bytes, '\0');
    return im;
  };
  ExpectInvalid(with(Info("w", {32}, 99, 0)), {"\"w\"", "ggml type 99"});
  ExpectInvalid(with(Info("w", {32}, 4, 0)), {"\"w\"", "ggml type 4"});  // Q4_2: long removed
  ExpectInvalid(with(Info("w", {1, 1, 1, 1, 1}, kF32, 0)), {"\"w\"", "5 dimensions"});
  ExpectInvalid(with(Info("w", {}, kF32, 0)), {"\"w\"", "0 dimensions"});
  ExpectInvalid(with(Info("w", {4, 0}, kF32, 0)), {"\"w\"", "ne[1] = 0"});
  ExpectInvalid(with(Info("w", {uint64_t{1} << 63}, kF32, 0)), {"\"w\"", "ne[0]"});
  ExpectInvalid(with(Info("w", {uint64_t{1} << 32, uint64_t{1} << 32}, kF32, 0)),
                {"\"w\"", "overflows"});
  // 2^62 elements fit int64, but not as bytes of F32.
  ExpectInvalid(with(Info("w", {uint64_t{1} << 31, uint64_t{1} << 31}, kF32, 0)),
                {"\"w\"", "byte size", "overflows"});
  ExpectInvalid(with(Info("w", {48, 2}, kQ4_0, 0)),
                {"\"w\"", "ne[0] = 48", "multiple of the Q4_0 block of 32"});
  ExpectInvalid(with(Info("w", {128}, kQ4_K, 0)), {"\"w\"", "Q4_K block of 256"});
  ExpectInvalid(with(Info("w", {4}, kF32, 16)), {"\"w\"", "offset 16", "alignment 32"});
  ExpectInvalid(with(Info("w", {4}, kF32, 4096)), {"\"w\"", "end past the end of the file"});
  ExpectInvalid(with(Info("w", {2048}, kF32, 0)), {"\"w\"", "end past the end of the file"});
  // An aligned offset near 2^64 must not wrap around.
  ExpectInvalid(with(Info("w", {4}, kF32, ~uint64_t{31})), {"\"w\"", "end past the end"});
}

TEST_F(GgufTest, OverlappingTensors) {
  Image im;
  im.infos = {Info("first", {16}, kF32, 0), Info("second", {8}, kF32, 32)};
  im.data = std::string(128, '\0');
  ExpectInvalid(im, {"\"second\"", "overlaps", "\"first\""});
  // The same offset, listed in the other order.
  im.infos = {Info("late", {8}, kF32, 64), Info("early", {32}, kF32, 0)};
  ExpectInvalid(im, {"overlaps", "\"late\"", "\"early\""});
  // Back to back is fine.
  im.infos = {Info("first", {8}, kF32, 0), Info("second", {8}, kF32, 32)};
  EXPECT_TRUE(OpenImage(im).ok());
}

TEST_F(GgufTest, DuplicateKeysAndTensorNames) {
  Image im = SmallImage();
  im.kvs.push_back(KvU32("llama.block_count", 3));
  ExpectInvalid(im, {"\"llama.block_count\"", "duplicate key"});
  im = SmallImage();
  im.infos[1] = Info("a.weight", {32, 2}, kQ8_0, 32);
  ExpectInvalid(im, {"\"a.weight\"", "duplicate tensor name"});
}

TEST_F(GgufTest, BadAlignmentValues) {
  for (uint32_t bad : {0u, 3u, 48u, 0x80000001u}) {
    Image im = SmallImage();
    im.kvs.push_back(KvU32("general.alignment", bad));
    ExpectInvalid(im, {"\"general.alignment\"", std::to_string(bad), "power of two"});
  }
  Image im = SmallImage();
  im.kvs.push_back(Kv("general.alignment", VT::kUint64, U64(32)));
  ExpectInvalid(im, {"\"general.alignment\"", "uint32", "uint64"});
  im = SmallImage();
  im.kvs.push_back(Kv("general.alignment", VT::kInt32, Le<int32_t>(32)));
  ExpectInvalid(im, {"\"general.alignment\"", "uint32", "int32"});
  // A valid alignment that the offsets do not respect.
  im = SmallImage();
  im.kvs.push_back(KvU32("general.alignment", 64));
  im.alignment = 64;
  ExpectInvalid(im, {"\"b.weight\"", "offset 32", "alignment 64"});
}

// Parse() is Open() without the file: the same checks over bytes in memory.
TEST_F(GgufTest, ParseFromMemory) {
  const std::string bytes = SmallImage().Bytes();
  StatusOr<GgufFile> f = GgufFile::Parse(reinterpret_cast<const unsigned char*>(bytes.data()),
                                         bytes.size(), "in-memory");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->path(), "in-memory");
  EXPECT_EQ(f->tensors()[0].data, reinterpret_cast<const unsigned char*>(bytes.data()) +
                                      SmallImage().DataStart());
  StatusOr<GgufFile> bad = GgufFile::Parse(reinterpret_cast<const unsigned char*>(bytes.data()),
                                           10, "in-memory");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  ExpectErrorContains(bad.status(), {"in-memory: ", "truncated"});
}

}  // namespace
}  // namespace millipede
