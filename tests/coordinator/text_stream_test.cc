#include "coordinator/text_stream.h"

#include <gtest/gtest.h>

#include "tests/coordinator/coordinator_test_util.h"

namespace millipede {
namespace {

// Pushes the bytes of `text` as ids; returns the concatenated deltas and whether a stop matched.
std::string PushAll(TextStream& s, const std::string& text, bool* stopped) {
  std::string out;
  *stopped = false;
  for (unsigned char c : text) {
    auto piece = s.Push(c);
    EXPECT_TRUE(piece.ok());
    out += piece->delta;
    *stopped = *stopped || piece->stopped;
  }
  return out;
}

TEST(TextStreamTest, CompletesUtf8BeforeItGoesOut) {
  auto tok = coordinator_test::ByteTokenizer();
  TextStream s(*tok, {});
  auto first = s.Push(0xC3);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->delta, "");
  EXPECT_TRUE(first->open);
  auto second = s.Push(0xA9);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->delta, "\xC3\xA9");
  EXPECT_FALSE(second->open);
  EXPECT_EQ(s.Finish(), "");
  EXPECT_EQ(s.text(), "\xC3\xA9");
}

TEST(TextStreamTest, StopStringCutsAcrossTokens) {
  auto tok = coordinator_test::ByteTokenizer();
  TextStream s(*tok, {"STOP", "zz"});
  bool stopped = false;
  std::string out = PushAll(s, "abcST", &stopped);
  EXPECT_EQ(out, "abc");  // "ST" could start "STOP": held
  EXPECT_FALSE(stopped);
  out += PushAll(s, "OPtail", &stopped);
  EXPECT_TRUE(stopped);
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(out, "abc");
  EXPECT_EQ(s.text(), "abc");
  EXPECT_EQ(s.Finish(), "");
}

TEST(TextStreamTest, HeldPrefixThatNeverMatchesIsReleased) {
  auto tok = coordinator_test::ByteTokenizer();
  TextStream s(*tok, {"STOP"});
  bool stopped = false;
  std::string out = PushAll(s, "xSTO", &stopped);
  EXPECT_EQ(out, "x");
  out += PushAll(s, "y", &stopped);
  EXPECT_EQ(out, "xSTOy");
  out += PushAll(s, "ST", &stopped);
  out += s.Finish();  // the end: a partial stop string is text
  EXPECT_FALSE(stopped);
  EXPECT_EQ(out, "xSTOyST");
  EXPECT_EQ(s.text(), out);
}

TEST(TextStreamTest, EarliestOfSeveralStopsWins) {
  auto tok = coordinator_test::ByteTokenizer();
  TextStream s(*tok, {"cd", "bcde"});
  bool stopped = false;
  std::string out = PushAll(s, "abcde", &stopped);
  EXPECT_TRUE(stopped);
  EXPECT_EQ(s.text(), "ab");
  EXPECT_EQ(out, "ab");
}

TEST(TextStreamTest, NoStopsStreamsEverything) {
  auto tok = coordinator_test::ByteTokenizer();
  TextStream s(*tok, {});
  bool stopped = false;
  EXPECT_EQ(PushAll(s, "hello world", &stopped), "hello world");
  EXPECT_FALSE(stopped);
}

}  // namespace
}  // namespace millipede
