// The pattern table (policy/pattern_table.h): one entry per prefill pattern and decode role in
// enum order, names and aliases that parse back, and parameters read from and checked under
// their names in the policy file, whatever the pattern or role.
#include "policy/pattern_table.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace millipede {
namespace {

TEST(PatternTableTest, OneEntryPerEnumeratorInOrderWithUniqueNames) {
  ASSERT_EQ(PrefillPatternTable().size(), static_cast<size_t>(kNumPrefillPatterns));
  ASSERT_EQ(DecodeRoleTable().size(), static_cast<size_t>(kNumDecodeRoles));
  std::set<std::string> names;
  std::set<char> codes;
  for (int i = 0; i < kNumPrefillPatterns; ++i) {
    const PrefillPatternFacts& f = PrefillPatternTable()[static_cast<size_t>(i)];
    EXPECT_EQ(static_cast<int>(f.pattern), i);
    EXPECT_EQ(FindPatternFacts(f.pattern), &f);
    EXPECT_TRUE(names.insert(f.name).second) << f.name;
    EXPECT_TRUE(codes.insert(f.code).second) << f.code;
    EXPECT_EQ(f.params.empty(), f.params_key == nullptr) << f.name;
    EXPECT_EQ(ParsePrefillPattern(f.name).value(), f.pattern);
    if (f.alias != nullptr) {
      EXPECT_EQ(ParsePrefillPattern(f.alias).value(), f.pattern);
    }
  }
  names.clear();
  codes.clear();
  for (int i = 0; i < kNumDecodeRoles; ++i) {
    const DecodeRoleFacts& f = DecodeRoleTable()[static_cast<size_t>(i)];
    EXPECT_EQ(static_cast<int>(f.role), i);
    EXPECT_EQ(FindRoleFacts(f.role), &f);
    EXPECT_TRUE(names.insert(f.name).second) << f.name;
    EXPECT_TRUE(codes.insert(f.code).second) << f.code;
    EXPECT_EQ(f.params.empty(), f.params_key == nullptr) << f.name;
    EXPECT_EQ(ParseDecodeRole(f.name).value(), f.role);
    if (f.alias != nullptr) {
      EXPECT_EQ(ParseDecodeRole(f.alias).value(), f.role);
    }
  }
  EXPECT_EQ(FindPatternFacts(static_cast<PrefillPattern>(kNumPrefillPatterns)), nullptr);
  EXPECT_EQ(FindRoleFacts(static_cast<DecodeRole>(kNumDecodeRoles)), nullptr);
}

TEST(PatternTableTest, EveryPatternsParametersAreReadAndCheckedUnderTheirNames) {
  for (const PrefillPatternFacts& f : PrefillPatternTable()) {
    if (f.params.empty()) continue;
    SCOPED_TRACE(f.name);
    // Each parameter a distinct value, in a layer entry's object for the pattern's heads.
    std::string object;
    for (size_t i = 0; i < f.params.size(); ++i)
      object += std::string(object.empty() ? "" : ", ") + "\"" + f.params[i].name +
                "\": " + std::to_string(7 + i);
    const std::string text = R"({"version": 1, "layers": [{"layer": 1, "prefill": ")" +
                             std::string(f.name) + R"(", ")" + f.params_key + R"(": {)" + object +
                             "}}]}";
    StatusOr<AttentionPolicy> p = ParseAttentionPolicy(text, 2, 2);
    ASSERT_TRUE(p.ok()) << text << " -> " << p.status().ToString();
    for (size_t i = 0; i < f.params.size(); ++i) {
      EXPECT_EQ(f.params[i].read(p->layers[1].prefill[0]), static_cast<int64_t>(7 + i));
      // Validation checks what the pattern reads, naming it as the file does.
      AttentionPolicy bad = *p;
      f.params[i].ref(bad.layers[1].prefill[1]) = 0;
      const Status s = ValidateAttentionPolicy(bad, 2, 2);
      EXPECT_NE(s.message().find(std::string(f.params_key) + "." + f.params[i].name +
                                 " must be positive"),
                std::string::npos)
          << s.ToString();
    }
  }
}

TEST(PatternTableTest, EveryRolesParametersAreReadAndCheckedUnderTheirNames) {
  for (const DecodeRoleFacts& f : DecodeRoleTable()) {
    if (f.params.empty()) continue;
    SCOPED_TRACE(f.name);
    std::string object;
    for (size_t i = 0; i < f.params.size(); ++i)
      object += std::string(object.empty() ? "" : ", ") + "\"" + f.params[i].name +
                "\": " + std::to_string(7 + i);
    const std::string text =
        R"({"version": 1, ")" + std::string(f.params_key) + R"(": {)" + object + "}}";
    StatusOr<AttentionPolicy> p = ParseAttentionPolicy(text, 2, 2);
    ASSERT_TRUE(p.ok()) << text << " -> " << p.status().ToString();
    for (size_t i = 0; i < f.params.size(); ++i) {
      EXPECT_EQ(f.params[i].read(*p), static_cast<int64_t>(7 + i));
      AttentionPolicy bad = *p;
      f.params[i].ref(bad) = 0;
      const Status s = ValidateAttentionPolicy(bad, 2, 2);
      EXPECT_NE(s.message().find(std::string(f.params_key) + "." + f.params[i].name +
                                 " must be positive"),
                std::string::npos)
          << s.ToString();
    }
  }
}

}  // namespace
}  // namespace millipede
