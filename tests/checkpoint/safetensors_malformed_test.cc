// Malformed safetensors files, built byte by byte: each must fail with a message naming the file
// and the problem.
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "checkpoint/safetensors.h"
#include "tests/checkpoint/test_util.h"

namespace millipede {
namespace {

using testing::ExpectErrorContains;
using testing::LengthPrefix;
using testing::SafetensorsImage;
using testing::ScratchDir;
using testing::WriteBytes;

class SafetensorsMalformedTest : public ::testing::Test {
 protected:
  // Writes `bytes` as a file and returns what opening it gives.
  Status OpenBytes(const std::string& bytes) {
    WriteBytes(path_, bytes);
    return SafetensorsFile::Open(path_).status();
  }
  // The header with `data_bytes` of zero data.
  Status OpenHeader(const std::string& header, size_t data_bytes) {
    return OpenBytes(SafetensorsImage(header, data_bytes));
  }
  // Expects InvalidArgument naming the file and containing `parts`.
  void ExpectInvalid(const Status& s, std::initializer_list<std::string_view> parts) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    ExpectErrorContains(s, {path_});
    ExpectErrorContains(s, parts);
  }

  ScratchDir dir_;
  std::string path_ = dir_.File("bad.safetensors");
};

TEST_F(SafetensorsMalformedTest, AcceptsTheWellFormedBaseline) {
  EXPECT_TRUE(OpenHeader(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8).ok());
}

TEST_F(SafetensorsMalformedTest, EmptyAndTruncatedFiles) {
  ExpectInvalid(OpenBytes(""), {"too short (0 bytes)"});
  ExpectInvalid(OpenBytes(std::string("\x10\0\0\0", 4)), {"too short (4 bytes)"});
  ExpectInvalid(OpenBytes(LengthPrefix(7).substr(0, 7)), {"too short (7 bytes)"});
  // The length says 64 bytes of header; the file stops after 20.
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  ExpectInvalid(OpenBytes(LengthPrefix(64) + header.substr(0, 20)),
                {"header length 64 extends past the end of the file (28 bytes)"});
}

TEST_F(SafetensorsMalformedTest, HeaderLengthBeyondFileOrCap) {
  ExpectInvalid(OpenBytes(LengthPrefix(1000) + "{}"), {"header length 1000 extends past"});
  ExpectInvalid(OpenBytes(LengthPrefix(100'000'001) + "{}"),
                {"header length 100000001 exceeds the limit of 100000000 bytes"});
  // A length near 2^64 must not wrap around when added to 8.
  ExpectInvalid(OpenBytes(LengthPrefix(~uint64_t{0}) + "{}"), {"exceeds the limit"});
}

TEST_F(SafetensorsMalformedTest, HeaderNotJsonObjectOrNotUtf8) {
  ExpectInvalid(OpenHeader(R"({"a": {"dtype": )", 0), {"invalid JSON"});
  ExpectInvalid(OpenHeader("", 0), {"invalid JSON"});
  ExpectInvalid(OpenHeader("[1, 2]", 0), {"header must be a JSON object, got array"});
  ExpectInvalid(OpenHeader("\"text\"", 0), {"header must be a JSON object, got string"});
  ExpectInvalid(OpenHeader("{\"\xff\xfe\": 1}", 0), {"not valid UTF-8"});
  ExpectInvalid(OpenHeader("{\"\xed\xa0\x80\": 1}", 0), {"not valid UTF-8"});  // a surrogate
}

TEST_F(SafetensorsMalformedTest, TensorEntryFields) {
  ExpectInvalid(OpenHeader(R"({"a": 3})", 0), {"tensor \"a\"", "entry must be an object"});
  ExpectInvalid(OpenHeader(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", 8),
                {"tensor \"a\"", "missing \"dtype\""});
  ExpectInvalid(OpenHeader(R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", 8),
                {"tensor \"a\"", "missing \"shape\""});
  ExpectInvalid(OpenHeader(R"({"a":{"dtype":"F32","shape":[2]}})", 8),
                {"tensor \"a\"", "missing \"data_offsets\""});
  ExpectInvalid(OpenHeader(R"({"a":{"dtype":7,"shape":[2],"data_offsets":[0,8]}})", 8),
                {"\"dtype\" must be a string"});
}

TEST_F(SafetensorsMalformedTest, UnknownDType) {
  ExpectInvalid(OpenHeader(R"({"w":{"dtype":"F8_E5M2","shape":[8],"data_offsets":[0,8]}})", 8),
                {"tensor \"w\"", "unknown dtype \"F8_E5M2\""});
  ExpectInvalid(OpenHeader(R"({"w":{"dtype":"bf16","shape":[4],"data_offsets":[0,8]}})", 8),
                {"unknown dtype \"bf16\""});
}

TEST_F(SafetensorsMalformedTest, BadShapes) {
  ExpectInvalid(OpenHeader(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", 0),
                {"tensor \"w\"", "shape[0] must be a non-negative integer, got -1"});
  ExpectInvalid(OpenHeader(R"({"w":{"dtype":"F32","shape":[2,2.5],"data_offsets":[0,0]}})", 0),
                {"shape[1] must be a non-negative integer, got 2.5"});
  ExpectInvalid(OpenHeader(R"({"w":{"dtype":"F32","shape":["2"],"data_offsets":[0,8]}})", 8),
                {"shape[0] must be a non-negative integer"});
  ExpectInvalid(OpenHeader(R"({"w":{"dtype":"F32","shape":3,"data_offsets":[0,12]}})", 12),
                {"\"shape\" must be an array"});
  ExpectInvalid(
      OpenHeader(R"({"w":{"dtype":"U8","shape":[1,1,1,1,1,1,1],"data_offsets":[0,1]}})", 1),
      {"7 dimensions; at most 6"});
  // Beyond int64 but inside uint64, and beyond uint64 (which JSON parses as a float).
  ExpectInvalid(OpenHeader(R"({"w":{"dtype":"U8","shape":[18446744073709551615],)"
                           R"("data_offsets":[0,0]}})",
                           0),
                {"shape[0] = 18446744073709551615 is too large"});
  ExpectInvalid(OpenHeader(R"({"w":{"dtype":"U8","shape":[99999999999999999999],)"
                           R"("data_offsets":[0,0]}})",
                           0),
                {"shape[0] must be a non-negative integer"});
}

TEST_F(SafetensorsMalformedTest, ByteSizeOverflowIsCaught) {
  // 2^32 * 2^32 elements wraps to 0 in 64 bits; so does 2^62 elements * 4 bytes.
  ExpectInvalid(OpenHeader(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],)"
                           R"("data_offsets":[0,0]}})",
                           0),
                {"tensor \"w\"", "overflows 64 bits"});
  ExpectInvalid(OpenHeader(R"({"w":{"dtype":"F32","shape":[4611686018427387904],)"
                           R"("data_offsets":[0,0]}})",
                           0),
                {"overflows 64 bits"});
}

TEST_F(SafetensorsMalformedTest, ShapeDisagreesWithByteRange) {
  ExpectInvalid(OpenHeader(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,8]}})", 8),
                {"tensor \"w\"",
                 "shape [2, 2] of F32 needs 16 bytes, but data_offsets [0, 8] "
                 "span 8"});
}

TEST_F(SafetensorsMalformedTest, BadOffsets) {
  ExpectInvalid(OpenHeader(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[8,4]}})", 8),
                {"tensor \"w\"", "data_offsets [8, 4] end before they begin"});
  ExpectInvalid(OpenHeader(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8),
                {"tensor \"w\"",
                 "data_offsets [0, 16] extend past the end of the data section "
                 "(8 bytes)"});
  ExpectInvalid(OpenHeader(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8),
                {"\"data_offsets\" must be two non-negative integers"});
  ExpectInvalid(OpenHeader(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", 8),
                {"\"data_offsets\" must be two non-negative integers"});
  ExpectInvalid(OpenHeader(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":"0-8"}})", 8),
                {"\"data_offsets\" must be two non-negative integers"});
}

TEST_F(SafetensorsMalformedTest, OverlappingTensors) {
  ExpectInvalid(
      OpenHeader(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                 R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                 12),
      {"tensor \"b\" (data_offsets [4, 12]) overlaps tensor \"a\" (data_offsets [0, 8])"});
  // Two names for the same bytes overlap as well.
  ExpectInvalid(OpenHeader(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                           8),
                {"overlaps"});
}

TEST_F(SafetensorsMalformedTest, GapsAndUncoveredBytes) {
  ExpectInvalid(OpenHeader(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                           R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                           12),
                {"gap of 4 bytes", "before tensor \"b\""});
  ExpectInvalid(OpenHeader(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
                {"gap of 4 bytes", "before tensor \"a\""});
  ExpectInvalid(OpenHeader(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8),
                {"4 bytes at the end of the data section belong to no tensor"});
  ExpectInvalid(OpenHeader("{}", 3), {"3 bytes at the end"});
}

TEST_F(SafetensorsMalformedTest, DuplicateNamesAndKeys) {
  ExpectInvalid(OpenHeader(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                           R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                           8),
                {"duplicate tensor name \"a\""});
  ExpectInvalid(OpenHeader(R"({"a":{"dtype":"F32","dtype":"F16","shape":[1],)"
                           R"("data_offsets":[0,4]}})",
                           4),
                {"duplicate key \"dtype\" in \"a\""});
  ExpectInvalid(OpenHeader(R"({"__metadata__":{"k":"1","k":"2"}})", 0),
                {"duplicate key \"k\" in \"__metadata__\""});
}

TEST_F(SafetensorsMalformedTest, BadMetadata) {
  ExpectInvalid(OpenHeader(R"({"__metadata__":{"format":1}})", 0),
                {"\"__metadata__\" value for \"format\" must be a string, got 1"});
  ExpectInvalid(OpenHeader(R"({"__metadata__":["pt"]})", 0),
                {"\"__metadata__\" must be an object of strings"});
  ExpectInvalid(OpenHeader(R"({"__metadata__":"pt"})", 0),
                {"\"__metadata__\" must be an object of strings"});
  // null is what the reference writes for "no metadata"; it is accepted.
  EXPECT_TRUE(OpenHeader(R"({"__metadata__":null})", 0).ok());
}

// Every truncation and every single-byte change of a valid file must give a Status, never a
// crash; accepted variants must describe ranges inside the file.
TEST(SafetensorsParseRobustnessTest, TruncationsAndByteFlips) {
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[2,3],)"
      R"("data_offsets":[0,12]},"b":{"dtype":"I64","shape":[1],"data_offsets":[12,20]}})";
  std::string image = SafetensorsImage(header, 20);
  const auto* base = reinterpret_cast<const unsigned char*>(image.data());
  ASSERT_TRUE(ParseSafetensorsHeader(base, image.size(), "ok").ok());

  auto check = [](const std::string& bytes) {
    const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
    auto parsed = ParseSafetensorsHeader(data, bytes.size(), "mutant");
    if (!parsed.ok()) {
      EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
      return;
    }
    for (const TensorInfo& t : parsed->tensors) {
      EXPECT_LE(parsed->data_offset + t.offset_end, bytes.size());
    }
  };
  for (size_t len = 0; len < image.size(); ++len) check(image.substr(0, len));
  for (size_t i = 0; i < image.size(); ++i) {
    for (unsigned char v : {0x00, 0x01, 0x22, 0x2c, 0x39, 0x5d, 0x7b, 0x7d, 0x80, 0xff}) {
      std::string mutant = image;
      mutant[i] = static_cast<char>(v);
      check(mutant);
    }
  }
}

}  // namespace
}  // namespace millipede
