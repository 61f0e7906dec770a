// NFC against values known from the Unicode standard (UAX #15 and UnicodeData.txt).
#include <gtest/gtest.h>

#include <string>

#include "tokenizer/normalizer_nfc.h"
#include "tokenizer/unicode_tables.h"

namespace millipede::tokenizer_internal {
namespace {

TEST(TokenizerNfcTest, AsciiAndStableTextIsUnchanged) {
  EXPECT_EQ(NfcNormalize(""), "");
  EXPECT_EQ(NfcNormalize("plain ASCII, 123!\n"), "plain ASCII, 123!\n");
  EXPECT_TRUE(IsNfcQuick("plain ASCII"));
  EXPECT_TRUE(IsNfcQuick("日本語 Привет"));
  EXPECT_EQ(NfcNormalize("日本語 Привет 😀"), "日本語 Привет 😀");
}

TEST(TokenizerNfcTest, ComposesBaseAndCombiningMark) {
  EXPECT_EQ(NfcNormalize("e\u0301"), "\u00e9");
  EXPECT_EQ(NfcNormalize("cafe\u0301!"), "caf\u00e9!");
  EXPECT_EQ(NfcNormalize("a\u0328\u0301"), "\u0105\u0301");  // ogonek composes, acute stays
  EXPECT_EQ(NfcNormalize("\u00c5\u0301"), "\u01fa");         // composes onto a composite
  EXPECT_EQ(NfcNormalize("e\u0301\u0301"), "\u00e9\u0301");  // second acute is blocked
  EXPECT_EQ(NfcNormalize("\u0b47\u0b3e"), "\u0b4b");         // two starters compose
  EXPECT_FALSE(IsNfcQuick("e\u0301"));
}

TEST(TokenizerNfcTest, SingletonDecompositions) {
  EXPECT_EQ(NfcNormalize("\u212b"), "\u00c5");  // ANGSTROM SIGN -> A WITH RING ABOVE
  EXPECT_EQ(NfcNormalize("\u2126"), "\u03a9");  // OHM SIGN -> GREEK CAPITAL OMEGA
  EXPECT_EQ(NfcNormalize("\u212a"), "K");       // KELVIN SIGN -> K
}

TEST(TokenizerNfcTest, CompositionExclusionsStayDecomposed) {
  EXPECT_EQ(NfcNormalize("\u0958"), "\u0915\u093c");  // DEVANAGARI QA is excluded
  EXPECT_EQ(NfcNormalize("\u0915\u093c"), "\u0915\u093c");
  EXPECT_EQ(NfcNormalize("\u0344"), "\u0308\u0301");  // non-starter decomposition
  EXPECT_EQ(NfcNormalize("\u0f73"), "\u0f71\u0f72");
}

TEST(TokenizerNfcTest, ReordersCombiningMarksByClass) {
  EXPECT_EQ(NfcNormalize("q\u0307\u0323"), "q\u0323\u0307");  // dot below (220) before 230
  EXPECT_EQ(NfcNormalize("A\u0300\u0316"), "\u00c0\u0316");
  // The worked example of UAX #15: marks of equal class keep their order.
  EXPECT_EQ(NfcNormalize("a\u0315\u0300\u05ae\u0300b"), "\u00e0\u05ae\u0300\u0315b");
  EXPECT_EQ(NfcNormalize("\u1e9b\u0323"), "\u1e9b\u0323");
}

TEST(TokenizerNfcTest, HangulIsComposedAlgorithmically) {
  EXPECT_EQ(NfcNormalize("\u1100\u1161"), "\uac00");
  EXPECT_EQ(NfcNormalize("\u1100\u1161\u11a8"), "\uac01");
  EXPECT_EQ(NfcNormalize("\uac00\u11a8"), "\uac01");  // LV syllable + trailing jamo
  EXPECT_EQ(NfcNormalize("\u1112\u1161\u11ab"), "\ud55c");
  EXPECT_EQ(NfcNormalize("\u1100\uac00\u11a8"), "\u1100\uac01");
  EXPECT_EQ(NfcNormalize("\ud55c\uad6d\uc5b4"), "\ud55c\uad6d\uc5b4");  // already composed
  EXPECT_EQ(NfcNormalize("\uac01\u11a8"), "\uac01\u11a8");  // LVT takes no second trailer
}

TEST(TokenizerNfcTest, CombiningClassTable) {
  EXPECT_EQ(CanonicalCombiningClass('a'), 0);
  EXPECT_EQ(CanonicalCombiningClass(0x0301), 230);
  EXPECT_EQ(CanonicalCombiningClass(0x0323), 220);
  EXPECT_EQ(CanonicalCombiningClass(0x0334), 1);
  EXPECT_EQ(CanonicalCombiningClass(0x05AE), 228);
  EXPECT_EQ(CanonicalCombiningClass(0x093C), 7);
  EXPECT_EQ(CanonicalCombiningClass(0x10FFFF), 0);
  EXPECT_STRNE(kUnicodeTablesVersion, "");
}

}  // namespace
}  // namespace millipede::tokenizer_internal
